//! How the window operator's input and output travel: in batches of up to [`BATCH_RECORDS`]
//! records instead of Timely's default container of 8 KiB (31 events of ~260 bytes, ~40
//! feature rows). Used by the exchange that routes events to their window instance
//! ([`crate::window_features`]) and by the window operator's rows output, which the sinks
//! encode batch by batch ([`crate::file_sink`] hands each encoded batch to its writer worker).
//! Every container is an allocation, a push onto the next operator's queue (for another
//! worker a lock and, when it sleeps, a wake-up) and a free where it is consumed, so larger
//! batches cut those per-container costs ~30-fold. A batch that is not full is still sent
//! when the operator's activation ends (Timely flushes its outputs then): batching adds no
//! delay.

use std::collections::VecDeque;

use timely::container::{ContainerBuilder, LengthPreservingContainerBuilder, PushInto};

/// Records per batch at most (~260 KiB of ~260-byte events).
pub const BATCH_RECORDS: usize = 1024;

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
}

impl<T> Default for RecordBatches<T> {
    fn default() -> Self {
        Self {
            current: Vec::new(),
            spare: None,
            full: VecDeque::new(),
        }
    }
}

impl<T> PushInto<T> for RecordBatches<T> {
    #[inline]
    fn push_into(&mut self, item: T) {
        if self.current.capacity() == 0 {
            self.current = self.spare.take().unwrap_or_default();
            self.current.clear();
            self.current.reserve_exact(BATCH_RECORDS);
        }
        self.current.push(item);
        if self.current.len() >= BATCH_RECORDS {
            self.full.push_back(std::mem::take(&mut self.current));
        }
    }
}

impl<T: 'static> ContainerBuilder for RecordBatches<T> {
    type Container = Vec<T>;

    #[inline]
    fn extract(&mut self) -> Option<&mut Vec<T>> {
        self.spare = Some(self.full.pop_front()?);
        self.spare.as_mut()
    }

    #[inline]
    fn finish(&mut self) -> Option<&mut Vec<T>> {
        if !self.current.is_empty() {
            self.full.push_back(std::mem::take(&mut self.current));
        }
        self.spare = self.full.pop_front();
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
    use super::{RecordBatches, BATCH_RECORDS};
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
}
