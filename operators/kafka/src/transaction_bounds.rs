//! Which ticks' records the open Kafka transaction of an exactly-once sink takes
//! ([`crate::sink`]): the records of ticks up to and including the next checkpoint epoch to
//! pass, never a later tick's, so that a transaction committed before an epoch's manifest holds
//! only output whose input that manifest covers. Records of later ticks are kept back by the
//! writer until the transaction that takes them is open.

use weir_features::vocab::Tick;
use weir_operators::epochs::EpochClock;

/// The bound of a sink instance's open transaction.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TransactionBounds {
    epochs: EpochClock,
    /// Records of ticks before this go into the open transaction; `None` until the sink's
    /// input first passes an epoch (until then no record may be sent: the writer does not know
    /// which epoch passes first, e.g. after a restore).
    open_below: Option<Tick>,
}

impl TransactionBounds {
    pub(crate) fn new(epochs: EpochClock) -> Self {
        TransactionBounds {
            epochs,
            open_below: None,
        }
    }

    /// Records of ticks before this go into the open transaction (`None`: none yet).
    pub(crate) fn open_below(&self) -> Option<Tick> {
        self.open_below
    }

    /// Whether a record of `tick` goes into the open transaction now (else it is kept back).
    pub(crate) fn admits(&self, tick: Tick) -> bool {
        self.open_below.is_some_and(|bound| tick < bound)
    }

    /// The sink's input passed `frontier`: the epochs before it are complete, so the open
    /// transaction takes every record up to the last of them, and none after it.
    pub(crate) fn input_passed(&mut self, frontier: Tick) {
        if let Some(last) = self.epochs.last_before(frontier) {
            let bound = last.saturating_add(1);
            self.open_below = Some(self.open_below.map_or(bound, |b| b.max(bound)));
        }
    }

    /// The open transaction was committed: the next one takes the ticks up to and including
    /// the epoch after.
    pub(crate) fn committed(&mut self) {
        if let Some(bound) = self.open_below {
            self.open_below = Some(transaction_end(self.epochs, bound));
        }
    }
}

/// One past the first checkpoint epoch at or after `tick`.
fn transaction_end(epochs: EpochClock, tick: Tick) -> Tick {
    epochs
        .first_at_or_after(tick)
        .map_or(Tick::MAX, |epoch| epoch.saturating_add(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An epoch every 5 ticks: 0, 5, 10, ...
    fn every_five() -> EpochClock {
        EpochClock::every(500, 100)
    }

    #[test]
    fn a_transaction_takes_the_ticks_up_to_and_including_its_epoch() {
        let epochs = every_five();
        assert_eq!(transaction_end(epochs, 6), 11);
        assert_eq!(transaction_end(epochs, 10), 11);
        assert_eq!(transaction_end(epochs, 11), 16);
        // The frontier at 13 has passed epoch 10, not 15: ticks 11 and 12 wait for the next.
        assert_eq!(epochs.last_before(13), Some(10));
        assert_eq!(epochs.last_before(11), Some(10));
        assert_eq!(epochs.last_before(10), Some(5));
        assert_eq!(EpochClock::OFF.last_before(10), None);
        assert_eq!(transaction_end(EpochClock::OFF, 10), Tick::MAX);
    }

    /// Review finding: the first transaction's bound was taken from the first record's tick,
    /// so a record of tick 17 arriving while the input was still before 16 (a restored or
    /// multi-worker run) was committed with epoch 15 and replayed after a crash past it.
    #[test]
    fn no_record_enters_a_transaction_before_its_epoch_is_the_next_to_pass() {
        let mut bounds = TransactionBounds::new(every_five());
        assert!(
            !bounds.admits(17),
            "nothing is sent before an epoch has passed"
        );
        assert!(!bounds.admits(3));
        bounds.input_passed(16);
        assert_eq!(bounds.open_below(), Some(16));
        assert!(bounds.admits(15) && !bounds.admits(16) && !bounds.admits(17));
        bounds.committed();
        assert_eq!(
            bounds.open_below(),
            Some(21),
            "the next takes ticks 16 to 20"
        );
        assert!(bounds.admits(17) && bounds.admits(20) && !bounds.admits(21));
        // The input passing several epochs at once widens the open transaction to the last.
        bounds.input_passed(31);
        assert_eq!(bounds.open_below(), Some(31));
        // An input that has not passed the bound yet never narrows it.
        bounds.committed();
        bounds.input_passed(32);
        assert_eq!(bounds.open_below(), Some(36));
    }
}
