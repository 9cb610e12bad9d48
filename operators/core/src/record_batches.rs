//! How the window operator's input travels: in batches of up to [`BATCH_RECORDS`]
//! records instead of Timely's default container of 8 KiB (31 events of ~260 bytes). Used by
//! the exchange that routes events to their window instance ([`crate::window_features`]),
//! through [`RouteRecords`], which moves each event into its batch once.
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

use timely::communication::Push;
use timely::container::{ContainerBuilder, PushInto};
use timely::dataflow::channels::pushers::exchange::Distributor;
use timely::dataflow::channels::Message;
use timely::progress::Stamp;

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
        self.room_for_one();
        self.current.push(item);
        if self.current.len() >= BATCH_RECORDS {
            self.seal();
        }
    }
}

impl<T> RecordBatches<T> {
    /// Makes room for one more item in the current batch: a new batch has room for the last
    /// one's length and a quarter more; one longer than that doubles, up to the bound.
    #[inline]
    fn room_for_one(&mut self) {
        if self.current.capacity() == 0 {
            self.current = self.spare.take().unwrap_or_default();
            self.current.clear();
            self.current
                .reserve_exact(room_after(self.last_len, BATCH_RECORDS));
        } else if self.current.len() == self.current.capacity() {
            let len = self.current.len();
            self.current.reserve_exact(len.min(BATCH_RECORDS - len));
        }
    }

    /// The current batch is full: it waits for `extract`.
    fn seal(&mut self) {
        self.full.push_back(std::mem::take(&mut self.current));
    }
}

/// The room a batch starts with after one of `last_len` records: that and a quarter more,
/// within [`FIRST_BATCH`] and `most` ([`BATCH_RECORDS`] for a batch of records; the window
/// operator's row parts take their activation's row budget).
pub fn room_after(last_len: usize, most: usize) -> usize {
    (last_len + last_len / 4).clamp(FIRST_BATCH, most)
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

/// The exchange's distributor for records ([`RecordBatches`] per target worker): each record
/// is moved once, from the container it came in straight into its target's batch. Timely's
/// own (`DrainContainerDistributor`) moves it twice, out of the container onto the stack and
/// from there into the batch: with ~260-byte events those copies were 2 of the 3 event copies
/// (a third of all bytes copied) of a features run.
pub struct RouteRecords<T, F> {
    batches: Vec<RecordBatches<T>>,
    route: F,
}

impl<T, F: FnMut(&T) -> u64> RouteRecords<T, F> {
    /// A distributor over `peers` targets, `route` giving each record's target.
    pub fn new(route: F, peers: usize) -> Self {
        Self {
            batches: std::iter::repeat_with(RecordBatches::default)
                .take(peers)
                .collect(),
            route,
        }
    }
}

impl<T: 'static, F: FnMut(&T) -> u64> Distributor<Vec<T>> for RouteRecords<T, F> {
    fn partition<S: Clone, P: Push<Message<S, Vec<T>>>>(
        &mut self,
        container: &mut Vec<T>,
        stamp: &Stamp<S>,
        pushers: &mut [P],
    ) {
        let peers = pushers.len();
        let len = container.len();
        // SAFETY: from here on the container owns none of its `len` records (its length is 0):
        // each is read exactly once below and its bytes copied into a batch, which owns it
        // from then on. A panic part way leaks the records not yet moved, never drops one
        // twice.
        #[allow(unsafe_code)]
        unsafe {
            container.set_len(0);
        }
        let records = container.as_ptr();
        for i in 0..len {
            // SAFETY: `i < len`, within the container's allocation, and not yet moved.
            #[allow(unsafe_code)]
            let record = unsafe { &*records.add(i) };
            // A route is a worker, below `peers`: the remainder (a division per record) is
            // taken only for one that is not.
            let mut target = (self.route)(record) as usize;
            if target >= peers {
                target %= peers;
            }
            let batch = &mut self.batches[target];
            batch.room_for_one();
            // SAFETY: `room_for_one` left room for one more record in `batch.current`; the
            // record's bytes move there (the container no longer owns it) and the length
            // then counts it.
            #[allow(unsafe_code)]
            unsafe {
                let end = batch.current.len();
                std::ptr::copy_nonoverlapping(record, batch.current.as_mut_ptr().add(end), 1);
                batch.current.set_len(end + 1);
            }
            if batch.current.len() >= BATCH_RECORDS {
                batch.seal();
                while let Some(full) = batch.extract() {
                    Message::push_at(full, stamp.clone(), &mut pushers[target]);
                }
            }
        }
    }

    fn flush<S: Clone, P: Push<Message<S, Vec<T>>>>(
        &mut self,
        stamp: &Stamp<S>,
        pushers: &mut [P],
    ) {
        for (batch, pusher) in self.batches.iter_mut().zip(pushers.iter_mut()) {
            while let Some(container) = batch.finish() {
                Message::push_at(container, stamp.clone(), pusher);
            }
        }
    }

    fn relax(&mut self) {
        self.batches.iter_mut().for_each(ContainerBuilder::relax);
    }
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;

    use super::{RecordBatches, RouteRecords, BATCH_RECORDS, FIRST_BATCH};
    use timely::communication::Push;
    use timely::container::{ContainerBuilder, PushInto};
    use timely::dataflow::channels::pushers::exchange::Distributor;
    use timely::dataflow::channels::Message;
    use timely::progress::Stamp;

    /// One target of an exchange: the containers pushed to it.
    #[derive(Default)]
    struct Target(Vec<Vec<(usize, Rc<()>)>>);

    impl Push<Message<u64, Vec<(usize, Rc<()>)>>> for Target {
        fn push(&mut self, message: &mut Option<Message<u64, Vec<(usize, Rc<()>)>>>) {
            if let Some(message) = message.take() {
                self.0.push(message.data);
            }
        }
    }

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

    #[test]
    fn routed_records_reach_their_target_once_each_in_order() {
        // Each record holds a clone of one `Rc`: a record dropped twice (or leaked) would
        // change its count.
        let alive = Rc::new(());
        let mut router = RouteRecords::new(|r: &(usize, Rc<()>)| (r.0 % 3) as u64, 3);
        let mut targets: Vec<Target> = (0..3).map(|_| Target::default()).collect();
        let stamp = Stamp::from_elem(7u64);
        let n = BATCH_RECORDS * 4 + 11;
        for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
            let mut container: Vec<_> = chunk.iter().map(|&i| (i, alive.clone())).collect();
            router.partition(&mut container, &stamp, &mut targets);
            assert!(container.is_empty(), "every record moved out");
        }
        router.flush(&stamp, &mut targets);
        assert_eq!(
            Rc::strong_count(&alive),
            n + 1,
            "no record dropped or copied"
        );
        for (t, target) in targets.iter().enumerate() {
            assert!(target.0.iter().all(|b| b.len() <= BATCH_RECORDS));
            let got: Vec<usize> = target.0.iter().flatten().map(|r| r.0).collect();
            let want: Vec<usize> = (0..n).filter(|i| i % 3 == t).collect();
            assert_eq!(got, want, "target {t}: its records, in push order");
        }
        drop(targets);
        assert_eq!(Rc::strong_count(&alive), 1, "every record dropped once");
    }
}
