//! The layer in front of every route: it checks the token from the request
//! headers and answers a refusal without reading the body, then lets the body
//! through a [`MessageScanner`] and a deadline, so that tonic never buffers or
//! decodes a message the method could not accept.

use std::future::{ready, Future, Ready};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::future::Either;
use http::header::AUTHORIZATION;
use http_body::{Body as HttpBody, Frame, SizeHint};
use tokio::time::Sleep;
use tonic::body::Body;
use tonic::Status;
use tower::{Layer, Service};

use crate::auth::Tokens;
use crate::limits::{rules_for, MessageLimits};
use crate::scan::MessageScanner;

/// What the guard enforces.
#[derive(Debug)]
pub(crate) struct Policy {
    pub(crate) tokens: Tokens,
    pub(crate) limits: MessageLimits,
    /// How long a single-message request may take to arrive in full.
    pub(crate) arrival_timeout: Duration,
}

/// Puts a [`Guard`] in front of a service.
#[derive(Clone, Debug)]
pub(crate) struct GuardLayer {
    policy: Arc<Policy>,
}

impl GuardLayer {
    pub(crate) fn new(policy: Policy) -> GuardLayer {
        GuardLayer { policy: Arc::new(policy) }
    }
}

impl<S> Layer<S> for GuardLayer {
    type Service = Guard<S>;

    fn layer(&self, inner: S) -> Guard<S> {
        Guard { inner, policy: Arc::clone(&self.policy) }
    }
}

/// Authenticates a call from its headers and bounds its request body.
#[derive(Clone, Debug)]
pub(crate) struct Guard<S> {
    inner: S,
    policy: Arc<Policy>,
}

impl<S> Service<http::Request<Body>> for Guard<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>>,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = Either<Ready<Result<http::Response<Body>, S::Error>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let rules = rules_for(request.uri().path(), &self.policy.limits);
        let authorization = request.headers().get(AUTHORIZATION).map(http::HeaderValue::as_bytes);
        if let Err(refusal) = crate::auth::check(&self.policy.tokens, authorization, rules.access) {
            // The body is dropped unread: the client's upload is cut off by
            // the end of the stream.
            return Either::Left(ready(Ok(refusal.into_http())));
        }
        let deadline = rules.single_request.then(|| Box::pin(tokio::time::sleep(self.policy.arrival_timeout)));
        let arrival_timeout = self.policy.arrival_timeout;
        let request = request.map(|body| {
            Body::new(GuardedBody { inner: body, scanner: MessageScanner::new(rules), deadline, arrival_timeout })
        });
        Either::Right(self.inner.call(request))
    }
}

/// A request body seen through a [`MessageScanner`], with an arrival deadline.
struct GuardedBody {
    inner: Body,
    scanner: MessageScanner,
    /// When the whole request must have arrived; `None` for streams.
    deadline: Option<Pin<Box<Sleep>>>,
    arrival_timeout: Duration,
}

impl HttpBody for GuardedBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    if let Err(refusal) = this.scanner.feed(data) {
                        return Poll::Ready(Some(Err(refusal)));
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(None) => {
                this.deadline = None;
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(status))) => Poll::Ready(Some(Err(status))),
            Poll::Pending => {
                let expired = this.deadline.as_mut().is_some_and(|deadline| deadline.as_mut().poll(cx).is_ready());
                if !expired {
                    return Poll::Pending;
                }
                this.deadline = None;
                let millis = this.arrival_timeout.as_millis();
                Poll::Ready(Some(Err(Status::deadline_exceeded(format!(
                    "the request did not arrive within {millis} ms"
                )))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
