//! The batch push: each job judged alone, written to the store in slices of
//! [`PIPELINE_SLICE`] jobs, each slice scheduled while the next is written.

use super::*;

impl DelayQueue {
    /// Adds several jobs, each judged alone, in store commits of up to
    /// [`PIPELINE_SLICE`] jobs, each scheduled while the next is written.
    ///
    /// # Errors
    /// The outer error only when no job could be written at all.
    #[instrument(level = "debug", skip_all, fields(jobs = requests.len()))]
    pub async fn push_batch(
        &self,
        requests: Vec<Result<PushRequest, InvalidField>>,
    ) -> QueueResult<Vec<QueueResult<Pushed>>> {
        let now = Timestamp::now();
        let _pushing = self.pushes.read().await;
        let PreparedBatch { mut outcomes, jobs, slots, named_ids } = self.prepare_batch(requests, now).await;
        if jobs.is_empty() {
            return Ok(outcomes);
        }
        let _id_guard = self.id_locks.lock_all(&named_ids).await;
        // Slices go to the store one after the other, and each is scheduled as
        // soon as it is stored, while the next ones are written and while the
        // slices before it may still be in the scheduler: the backends work side
        // by side, and the scheduler does not wait for the answer to one slice's
        // call to get the next (docs/measurements.md measures it against one
        // call in flight at a time).
        let slices: Vec<(&[Job], &[usize])> = jobs.chunks(PIPELINE_SLICE).zip(slots.chunks(PIPELINE_SLICE)).collect();
        let schedule_failed = AtomicBool::new(false);
        let (stored_tx, stored_rx) = mpsc::unbounded_channel();
        let (stored, scheduled) = futures::future::join(
            self.store_slices(&slices, &schedule_failed, stored_tx),
            self.schedule_slices(stored_rx, &schedule_failed),
        )
        .await;
        let mut pushed = 0;
        let mut failure: Option<QueueError> = None;
        for (slot, refused) in stored.refused {
            set_outcome(&mut outcomes, slot, Err(refused));
        }
        let mut unscheduled: Vec<usize> = Vec::new();
        for (accepted_slots, result) in scheduled {
            match result {
                Some(Ok(scheduled)) => {
                    for (slot, outcome) in accepted_slots.into_iter().zip(scheduled) {
                        let outcome = match outcome {
                            Err(QueueError::Conflict(_)) => match jobs.get(slot_job(&slots, slot)) {
                                Some(job) => self.settle_schedule(job, outcome).await,
                                None => outcome,
                            },
                            other => other,
                        };
                        match outcome {
                            Ok(()) => pushed += 1,
                            Err(error) => set_outcome(&mut outcomes, slot, Err(error)),
                        }
                    }
                }
                Some(Err(error)) => {
                    fail_slots(&mut outcomes, &accepted_slots, &error);
                    failure.get_or_insert(error);
                }
                // Stored after the scheduler failed, and not tried there: they
                // are stored; reconciliation schedules them.
                None => unscheduled.extend(accepted_slots),
            }
        }
        if let Some((error, failed_slots)) = stored.failure {
            fail_slots(&mut outcomes, &failed_slots, &error);
            failure.get_or_insert(error);
        }
        if let Some(error) = failure {
            fail_slots(&mut outcomes, &unscheduled, &error);
            // Slices never tried share the failure that stopped the batch.
            for (_, slice_slots) in slices.get(stored.tried..).unwrap_or_default() {
                fail_slots(&mut outcomes, slice_slots, &error);
            }
            if pushed == 0 {
                return Err(error);
            }
        }
        self.record_pushes(pushed);
        Ok(outcomes)
    }

    /// Judges each request of a batch: an invalid one gets its error, a
    /// replace is pushed on its own, and every other becomes a job to write.
    async fn prepare_batch(&self, requests: Vec<Result<PushRequest, InvalidField>>, now: Timestamp) -> PreparedBatch {
        let mut batch = PreparedBatch {
            outcomes: Vec::with_capacity(requests.len()),
            jobs: Vec::new(),
            slots: Vec::new(),
            named_ids: Vec::new(),
        };
        for request in requests {
            let request = match request {
                Ok(request) => request,
                Err(invalid) => {
                    batch.outcomes.push(Err(invalid.into()));
                    continue;
                }
            };
            if request.replace {
                // A replace needs its own read-check-write (and its own id
                // lock, taken before the batch takes the others'); it is rare in batches.
                batch.outcomes.push(self.push_one(request, now).await);
                continue;
            }
            if let Some(id) = &request.id {
                batch.named_ids.push(id.clone());
            }
            match self.new_job(request, now) {
                Ok(job) => {
                    batch.slots.push(batch.outcomes.len());
                    batch.outcomes.push(Ok(Pushed { id: job.id.clone(), run_at: job.run_at }));
                    batch.jobs.push(job);
                }
                Err(error) => batch.outcomes.push(Err(error)),
            }
        }
        batch
    }

    /// Writes `slices` to the store in order and sends each one's accepted jobs
    /// on to be scheduled; stops at a store failure, or before the next slice
    /// once the scheduler has failed.
    async fn store_slices<'j>(
        &self,
        slices: &[(&'j [Job], &'j [usize])],
        schedule_failed: &AtomicBool,
        stored_tx: mpsc::UnboundedSender<StoredSlice<'j>>,
    ) -> StoreSteps {
        let mut steps = StoreSteps { refused: Vec::new(), failure: None, tried: 0 };
        for &(slice, slice_slots) in slices {
            if schedule_failed.load(Ordering::Acquire) {
                break;
            }
            steps.tried += 1;
            let stored = match self.store.insert(slice.to_vec()).await {
                Ok(stored) => stored,
                Err(error) => {
                    steps.failure = Some((QueueError::from(error), slice_slots.to_vec()));
                    break;
                }
            };
            failpoint::crash_if_armed(failpoint::PUSH_AFTER_STORE);
            let accepted = if stored.iter().all(Result::is_ok) {
                (Cow::Borrowed(slice), slice_slots.to_vec())
            } else {
                let mut accepted = Vec::with_capacity(slice.len());
                let mut accepted_slots = Vec::with_capacity(slice.len());
                for ((job, &slot), outcome) in slice.iter().zip(slice_slots).zip(stored) {
                    match outcome {
                        Ok(()) => {
                            accepted.push(job.clone());
                            accepted_slots.push(slot);
                        }
                        Err(refused) => steps.refused.push((slot, refused.into())),
                    }
                }
                (Cow::Owned(accepted), accepted_slots)
            };
            if stored_tx.send(accepted).is_err() {
                break;
            }
        }
        steps
    }

    /// Schedules every stored slice as it arrives, several in flight at once;
    /// answers each slice's outcome in the order they were stored (`None`:
    /// not tried, because the scheduler had already failed).
    async fn schedule_slices(
        &self,
        mut stored_rx: mpsc::UnboundedReceiver<StoredSlice<'_>>,
        schedule_failed: &AtomicBool,
    ) -> Vec<(Vec<usize>, Option<QueueResult<Vec<QueueResult<()>>>>)> {
        let mut in_flight = FuturesOrdered::new();
        let mut done = Vec::new();
        let mut receiving = true;
        while receiving || !in_flight.is_empty() {
            tokio::select! {
                next = stored_rx.recv(), if receiving => match next {
                    Some((accepted, accepted_slots)) => {
                        let try_it = !schedule_failed.load(Ordering::Acquire);
                        in_flight.push_back(async move {
                            let outcome = if try_it { Some(self.scheduler.schedule_batch(&accepted).await) } else { None };
                            (accepted_slots, outcome)
                        });
                    }
                    None => receiving = false,
                },
                Some(slice) = in_flight.next(), if !in_flight.is_empty() => {
                    if matches!(slice.1, Some(Err(_))) {
                        schedule_failed.store(true, Ordering::Release);
                    }
                    done.push(slice);
                }
            }
        }
        done
    }
}

/// Jobs per store write of a batch push: the next slice is written to the
/// store while the previous one is scheduled. 256 is the largest multi-row
/// insert of the SQL stores, so a full slice is one statement.
const PIPELINE_SLICE: usize = 256;

/// A batch's entries once judged, before its jobs are written.
struct PreparedBatch {
    /// Each entry's outcome: final for a refused entry, else its answer should the write succeed.
    outcomes: Vec<QueueResult<Pushed>>,
    /// The jobs to write, in order.
    jobs: Vec<Job>,
    /// The outcome slot of each job.
    slots: Vec<usize>,
    /// The ids the entries named, locked while the batch is written.
    named_ids: Vec<JobId>,
}

/// A stored slice on its way to the scheduler: the jobs the store accepted and their slots.
type StoredSlice<'j> = (Cow<'j, [Job]>, Vec<usize>);

/// What writing a batch's slices to the store gave.
struct StoreSteps {
    /// Jobs the store refused, with their slots.
    refused: Vec<(usize, QueueError)>,
    /// The failure that stopped the writing, and the slots of the slice it failed.
    failure: Option<(QueueError, Vec<usize>)>,
    /// How many slices were tried (stored or failed).
    tried: usize,
}

/// Returns the index among a batch's jobs of the job whose outcome is at
/// `slot` (`slots` holds each job's outcome slot, in increasing order).
fn slot_job(slots: &[usize], slot: usize) -> usize {
    slots.binary_search(&slot).unwrap_or(usize::MAX)
}

/// Gives each job of a batch at `slots` its own copy of the failure that kept it out.
fn fail_slots(outcomes: &mut [QueueResult<Pushed>], slots: &[usize], error: &QueueError) {
    for &slot in slots {
        set_outcome(outcomes, slot, Err(error.unavailable_copy()));
    }
}

/// Sets the outcome of the batch entry at `slot` (slots are positions in the batch).
fn set_outcome(outcomes: &mut [QueueResult<Pushed>], slot: usize, outcome: QueueResult<Pushed>) {
    if let Some(place) = outcomes.get_mut(slot) {
        *place = outcome;
    }
}
