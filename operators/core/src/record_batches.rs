//! How the window operator's input travels: in batches of up to [`BATCH_RECORDS`]
//! records instead of Timely's default container of 8 KiB (31 events of ~260 bytes). Used by
//! the exchange that routes events to their window instance ([`crate::window_features`]).
//! (The window operator's rows need no builder: the window state appends them to one vector
//! per firing call, which the operator hands on whole.)
//! Every container is an allocation, a push onto the next operator's queue (for another
//! worker a lock and, when it sleeps, a wake-up) and a free where it is consumed, so larger
//! batches cut those per-container costs ~30-fold. A batch that is not full is still sent
//! when the operator's activation ends (Timely flushes its outputs then): batching adds no
//! delay. A batch starts with room for the last one handed out and a quarter more (at least
//! [`FIRST_BATCH`]) and doubles while it fills, so a live stream's few records an activation
//! do not each hold a full batch's memory while they wait downstream, and an activation that
//! sends a few more than the last one does not copy its batch into one twice as large (a
//! source's poll of 512 events splits into two targets' batches of about 256 each, give or
//! take a few: without the headroom half of them grew).

use std::collections::VecDeque;

use timely::container::{ContainerBuilder, LengthPreservingContainerBuilder, PushInto};

/// Records per batch at most (~260 KiB of ~260-byte events).
pub const BATCH_RECORDS: usize = 1024;

/// Room in a first batch, and at least in any (Timely's 8 KiB of ~260-byte events).
pub const FIRST_BATCH: usize = 32;

/// Builds the batches of one output (or, in an exchange, of one target worker), in push order.
#[derive(Debug)]
pub struct RecordBatches<T> {
    /// The batch being filled.
    current: Vec<T>,
    /// The last batch handed out, whose allocation comes back when the target is in this
    /// worker (Timely returns a drained container then) and is reused.
    spare: Option<Vec<T>>,
    /// Full batches not yet handed out.
    full: VecDeque<Vec<T>>,
    /// Length of the last batch handed out: a new batch starts with room for it and a
    /// quarter more ([`room_after`]).
    last_len: usize,
}

impl<T> Default for RecordBatches<T> {
    fn default() -> Self {
        Self {
            current: Vec::new(),
            spare: None,
            full: VecDeque::new(),
            last_len: 0,
        }
    }
}

impl<T> PushInto<T> for RecordBatches<T> {
    #[inline]
    fn push_into(&mut self, item: T) {
        if self.current.capacity() == 0 {
            self.current = self.spare.take().unwrap_or_default();
            self.current.clear();
            self.current.reserve_exact(room_after(self.last_len));
        } else if self.current.len() == self.current.capacity() {
            // Longer than the last batch: double, up to the bound.
            let len = self.current.len();
            self.current.reserve_exact(len.min(BATCH_RECORDS - len));
        }
        self.current.push(item);
        if self.current.len() >= BATCH_RECORDS {
            self.full.push_back(std::mem::take(&mut self.current));
        }
    }
}

/// The room a batch starts with after one of `last_len` records: that and a quarter more,
/// within [`FIRST_BATCH`] and [`BATCH_RECORDS`] (also the window operator's row parts).
pub fn room_after(last_len: usize) -> usize {
    (last_len + last_len / 4).clamp(FIRST_BATCH, BATCH_RECORDS)
}

impl<T: 'static> ContainerBuilder for RecordBatches<T> {
    type Container = Vec<T>;

    #[inline]
    fn extract(&mut self) -> Option<&mut Vec<T>> {
        let batch = self.full.pop_front()?;
        self.last_len = batch.len();
        self.spare = Some(batch);
        self.spare.as_mut()
    }

    #[inline]
    fn finish(&mut self) -> Option<&mut Vec<T>> {
        if !self.current.is_empty() {
            self.full.push_back(std::mem::take(&mut self.current));
        }
        self.spare = self.full.pop_front();
        if let Some(batch) = &self.spare {
            self.last_len = batch.len();
        }
        self.spare.as_mut()
    }

    fn relax(&mut self) {
        // Between activations hold no batch memory: an idle job keeps nothing per target.
        self.spare = None;
    }
}

// Every pushed item is in exactly one batch handed out by `extract` or `finish`.
impl<T: 'static> LengthPreservingContainerBuilder for RecordBatches<T> {}

#[cfg(test)]
mod tests {
    use super::{RecordBatches, BATCH_RECORDS, FIRST_BATCH};
    use timely::container::{ContainerBuilder, PushInto};

    fn drain(builder: &mut RecordBatches<usize>, finish: bool) -> Vec<Vec<usize>> {
        let mut out = Vec::new();
        loop {
            let next = if finish {
                builder.finish()
            } else {
                builder.extract()
            };
            let Some(batch) = next else {
                return out;
            };
            out.push(std::mem::take(batch));
        }
    }

    #[test]
    fn batches_keep_every_item_in_push_order() {
        let mut builder = RecordBatches::default();
        let n = BATCH_RECORDS * 2 + 7;
        let mut out = Vec::new();
        for i in 0..n {
            builder.push_into(i);
            out.extend(drain(&mut builder, false));
        }
        assert_eq!(out.len(), 2, "two full batches before the finish");
        assert!(out.iter().all(|b| b.len() == BATCH_RECORDS));
        let rest = drain(&mut builder, true);
        assert_eq!(rest.iter().map(Vec::len).collect::<Vec<_>>(), [7]);
        let all: Vec<usize> = out.into_iter().chain(rest).flatten().collect();
        assert_eq!(all, (0..n).collect::<Vec<_>>());
        assert!(drain(&mut builder, true).is_empty(), "nothing is left");
    }

    #[test]
    fn a_returned_allocation_is_reused() {
        let mut builder = RecordBatches::default();
        for i in 0..BATCH_RECORDS {
            builder.push_into(i);
        }
        let batch = builder.extract().expect("a full batch");
        let address = batch.as_ptr();
        // Timely leaves a drained container in place when its target is in this worker.
        batch.clear();
        builder.push_into(1);
        let next = builder.finish().expect("the started batch");
        assert_eq!(next.as_ptr(), address);
        assert_eq!(next.as_slice(), [1]);
    }

    #[test]
    fn a_batch_starts_with_room_for_the_last_and_a_quarter_and_doubles_up_to_the_bound() {
        let mut builder = RecordBatches::default();
        builder.push_into(0);
        let first = drain(&mut builder, true);
        assert_eq!(first[0].capacity(), FIRST_BATCH, "a first batch");
        for i in 0..600 {
            builder.push_into(i);
        }
        let grown = drain(&mut builder, true);
        assert_eq!(grown[0].len(), 600);
        assert!(
            grown[0].capacity() <= BATCH_RECORDS,
            "doubled from 32, not past the bound"
        );
        builder.push_into(1);
        let next = drain(&mut builder, true);
        assert_eq!(
            next[0].capacity(),
            750,
            "the last batch's length and a quarter"
        );
        builder.push_into(2);
        let after_short = drain(&mut builder, true);
        assert_eq!(
            after_short[0].capacity(),
            FIRST_BATCH,
            "a short batch keeps them small"
        );
    }
}
