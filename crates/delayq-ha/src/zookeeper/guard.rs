//! Runs ZooKeeper operations while watching the session state, so a connection loss fences
//! this node at once even while an operation is still waiting for an answer.

use std::future::Future;
use std::pin::pin;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use zookeeper_client::{Error as ZkError, SessionState, StateWatcher};

use super::shared::Shared;
use crate::RoleKind;

/// Why a round of the election stopped before it finished.
#[derive(Debug)]
pub(super) enum Interrupt {
    /// The leadership is shutting down.
    Cancelled,
    /// The connection broke; the session may survive. This node has been fenced.
    Disconnected,
    /// The session is over (expired, closed, auth failed). This node has been fenced.
    SessionEnded,
    /// ZooKeeper refused an operation; the round is retried after a pause.
    Refused(ZkError),
    /// The cluster is in a state this node cannot act on yet; retried after a pause.
    Stuck(&'static str),
}

/// Watches the session state of one client and fences on connection loss.
pub(super) struct StateGuard<'a> {
    states: StateWatcher,
    shared: &'a Shared,
    cancel: &'a CancellationToken,
}

impl<'a> StateGuard<'a> {
    /// Creates a guard over `states`, publishing fences through `shared`.
    pub(super) fn new(states: StateWatcher, shared: &'a Shared, cancel: &'a CancellationToken) -> Self {
        StateGuard { states, shared, cancel }
    }

    /// Awaits a ZooKeeper operation, mapping its error to an `Interrupt`.
    pub(super) async fn call<T>(
        &mut self,
        operation: impl Future<Output = Result<T, ZkError>>,
    ) -> Result<T, Interrupt> {
        let result = self.call_raw(operation).await?;
        result.map_err(|err| self.interrupt_for(err))
    }

    /// Awaits any future, fencing as soon as the session state leaves `SyncConnected`.
    ///
    /// The future is dropped on a fence or a cancellation; ZooKeeper may still apply a write
    /// it carried, so every caller's write is idempotent or checked on the next round.
    pub(super) async fn call_raw<T>(&mut self, operation: impl Future<Output = T>) -> Result<T, Interrupt> {
        let mut operation = pin!(operation);
        loop {
            tokio::select! {
                biased;
                () = self.cancel.cancelled() => return Err(Interrupt::Cancelled),
                state = self.states.changed() => self.on_state(state)?,
                output = &mut operation => return Ok(output),
            }
        }
    }

    /// Waits for the next session state change and fences if it is not a connected state.
    pub(super) async fn state_changed(&mut self) -> Result<(), Interrupt> {
        tokio::select! {
            () = self.cancel.cancelled() => Err(Interrupt::Cancelled),
            state = self.states.changed() => self.on_state(state),
        }
    }

    /// Waits until the session is connected again after a connection loss.
    pub(super) async fn wait_connected(&mut self) -> Result<(), Interrupt> {
        let mut state = self.states.state();
        loop {
            match state {
                SessionState::SyncConnected => {
                    info!("zookeeper connection restored, re-entering the election");
                    return Ok(());
                }
                SessionState::Disconnected | SessionState::ConnectedReadOnly => {}
                _ => return Err(self.end_session(state)),
            }
            tokio::select! {
                () = self.cancel.cancelled() => return Err(Interrupt::Cancelled),
                next = self.states.changed() => state = next,
            }
        }
    }

    /// Returns the `Interrupt` for a failed operation, fencing when the session is affected.
    pub(super) fn interrupt_for(&self, err: ZkError) -> Interrupt {
        match err {
            ZkError::ConnectionLoss => {
                self.fence(SessionState::Disconnected);
                Interrupt::Disconnected
            }
            ZkError::SessionExpired | ZkError::SessionMoved | ZkError::ClientClosed | ZkError::AuthFailed => {
                self.end_session(SessionState::Expired)
            }
            err => Interrupt::Refused(err),
        }
    }

    fn on_state(&self, state: SessionState) -> Result<(), Interrupt> {
        match state {
            SessionState::SyncConnected => Ok(()),
            // Read-only sessions are not requested; a read-only server cannot confirm leadership.
            SessionState::Disconnected | SessionState::ConnectedReadOnly => {
                self.fence(state);
                Err(Interrupt::Disconnected)
            }
            _ => Err(self.end_session(state)),
        }
    }

    fn end_session(&self, state: SessionState) -> Interrupt {
        self.fence(state);
        Interrupt::SessionEnded
    }

    fn fence(&self, state: SessionState) {
        match self.shared.fence() {
            Some(RoleKind::Leader) => warn!(%state, "zookeeper connection lost, stepped down as leader"),
            Some(_) => info!(%state, "zookeeper connection lost"),
            None => {}
        }
    }
}
