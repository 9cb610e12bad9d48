//! How the exchange in front of the window operator ([`crate::window_features`]) packs the
//! events it routes to each worker: batches of [`EXCHANGE_BATCH_EVENTS`] instead of Timely's
//! default of 8 KiB per container (31 events of ~260 bytes). Every batch that crosses to
//! another worker is an allocation on the sending thread, a push onto that worker's queue
//! (a lock and, when it sleeps, a wake-up) and a free on the receiving thread, so larger
//! batches cut those per-batch costs ~30-fold. A batch that is not full is still sent when
//! the source's activation ends (Timely flushes the exchange then), so batches add no delay.

use std::collections::VecDeque;

use timely::container::{ContainerBuilder, LengthPreservingContainerBuilder, PushInto};

/// Events per exchanged batch at most (~260 KiB of ~260-byte events).
pub const EXCHANGE_BATCH_EVENTS: usize = 1024;

/// Builds the exchange's batches for one target worker, in push order.
#[derive(Debug)]
pub struct ExchangeBatches<T> {
    /// The batch being filled.
    current: Vec<T>,
    /// The last batch handed out, whose allocation comes back when the target is in this
    /// worker (Timely returns a drained container then) and is reused.
    spare: Option<Vec<T>>,
    /// Full batches not yet handed out.
    full: VecDeque<Vec<T>>,
}

impl<T> Default for ExchangeBatches<T> {
    fn default() -> Self {
        Self {
            current: Vec::new(),
            spare: None,
            full: VecDeque::new(),
        }
    }
}

impl<T> PushInto<T> for ExchangeBatches<T> {
    #[inline]
    fn push_into(&mut self, item: T) {
        if self.current.capacity() == 0 {
            self.current = self.spare.take().unwrap_or_default();
            self.current.clear();
            self.current.reserve_exact(EXCHANGE_BATCH_EVENTS);
        }
        self.current.push(item);
        if self.current.len() >= EXCHANGE_BATCH_EVENTS {
            self.full.push_back(std::mem::take(&mut self.current));
        }
    }
}

impl<T: 'static> ContainerBuilder for ExchangeBatches<T> {
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
impl<T: 'static> LengthPreservingContainerBuilder for ExchangeBatches<T> {}

#[cfg(test)]
mod tests {
    use super::{ExchangeBatches, EXCHANGE_BATCH_EVENTS};
    use timely::container::{ContainerBuilder, PushInto};

    fn drain(builder: &mut ExchangeBatches<usize>, finish: bool) -> Vec<Vec<usize>> {
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
        let mut builder = ExchangeBatches::default();
        let n = EXCHANGE_BATCH_EVENTS * 2 + 7;
        let mut out = Vec::new();
        for i in 0..n {
            builder.push_into(i);
            out.extend(drain(&mut builder, false));
        }
        assert_eq!(out.len(), 2, "two full batches before the finish");
        assert!(out.iter().all(|b| b.len() == EXCHANGE_BATCH_EVENTS));
        let rest = drain(&mut builder, true);
        assert_eq!(rest.iter().map(Vec::len).collect::<Vec<_>>(), [7]);
        let all: Vec<usize> = out.into_iter().chain(rest).flatten().collect();
        assert_eq!(all, (0..n).collect::<Vec<_>>());
        assert!(drain(&mut builder, true).is_empty(), "nothing is left");
    }

    #[test]
    fn a_returned_allocation_is_reused() {
        let mut builder = ExchangeBatches::default();
        for i in 0..EXCHANGE_BATCH_EVENTS {
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
