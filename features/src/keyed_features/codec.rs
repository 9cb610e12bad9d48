//! The snapshot format of [`KeyedFeatures`]: a version tag, the state in bincode, and the side
//! tables older versions lacked; every older version still decodes (see [`STATE_VERSION`]).
//! The checkpoint writer stores these bytes per key-group shard.

use bincode::Options;

use super::KeyedFeatures;
use crate::error::{FeatureError, Result};
use crate::job_features::JobFeatures;
use crate::key_activity::KeyActivity;
use crate::sessions::ForgottenSessions;
use crate::window_state::KeyedWindows;

/// Version of the encoding written by [`KeyedFeatures::encode`]; bump it (and keep a decoder
/// for the old one) whenever a state struct changes. After the version tag (`u32`, LE):
///
/// - 1: `KeyedFeatures` in bincode.
/// - 2: the length of that (`u64`, LE), that, then per window group (in order) the session
///   windows' forgotten sessions (`Option<ForgottenSessions>`, bincode), which version 1 did
///   not keep. A version 1 snapshot restores with none: its expired sessions' revisions were
///   already lost.
/// - 3: as 2, with one more side table after the forgotten sessions: each key's last-record
///   time for every window group ([`KeyActivity`]). Versions 1 and 2 kept one such table per
///   window group, inside each group's [`KeyedWindows`] (where version 3 writes empty ones);
///   decoding merges those into the one table.
/// - 4: as 3, written while session windows that touch (one ends where the next starts) merge.
///   Decoding versions 1 to 3 merges each key's touching sessions first, so old state follows
///   the current rule (a merged session emits as a revision of the ones it joins).
/// - 5: as 4, with no accumulator word for a `count` without `where` in any slot: its value
///   is the slot's record count, written beside the words in every version. Decoding versions
///   1 to 4 drops those words (before merging touching sessions, which reads the layout).
pub const STATE_VERSION: u32 = 5;

impl KeyedFeatures {
    /// The state as bytes (format [`STATE_VERSION`]).
    pub fn encode(&self) -> Result<Vec<u8>> {
        let fail =
            |e: bincode::Error| FeatureError::Window(format!("cannot encode window state: {e}"));
        let mut out = STATE_VERSION.to_le_bytes().to_vec();
        out.extend_from_slice(&[0; 8]);
        bincode::serialize_into(&mut out, self).map_err(fail)?;
        let length = (out.len() - 12) as u64;
        out[4..12].copy_from_slice(&length.to_le_bytes());
        let forgotten: Vec<Option<&ForgottenSessions>> = self
            .states
            .iter()
            .map(KeyedWindows::forgotten_sessions)
            .collect();
        bincode::serialize_into(&mut out, &(forgotten, &self.activity)).map_err(fail)?;
        Ok(out)
    }

    /// Puts back a version-2 snapshot's forgotten sessions, one entry per window group.
    fn restore_forgotten_sessions(
        &mut self,
        forgotten: Vec<Option<ForgottenSessions>>,
    ) -> Result<()> {
        if forgotten.len() != self.states.len() {
            return Err(FeatureError::Window(format!(
                "window state snapshot lists forgotten sessions for {} window groups but holds {}",
                forgotten.len(),
                self.states.len()
            )));
        }
        for (group, (windows, forgotten)) in self.states.iter_mut().zip(forgotten).enumerate() {
            if let Some(forgotten) = forgotten {
                if !windows.restore_forgotten_sessions(forgotten) {
                    return Err(FeatureError::Window(format!(
                        "window state snapshot holds forgotten sessions for window group {group}, which is not a session window"
                    )));
                }
            }
        }
        Ok(())
    }

    /// Decodes [`KeyedFeatures::encode`]'s bytes, checking that they fit `job`.
    pub fn decode(job: &JobFeatures, bytes: &[u8]) -> Result<KeyedFeatures> {
        let short =
            || FeatureError::Window("window state snapshot is shorter than its header".to_owned());
        let (version, body) = bytes.split_at_checked(4).ok_or_else(short)?;
        let version = u32::from_le_bytes([version[0], version[1], version[2], version[3]]);
        let (main, side) = match version {
            1 => (body, None),
            2..=STATE_VERSION => {
                let (length, rest) = body.split_at_checked(8).ok_or_else(short)?;
                let mut word = [0u8; 8];
                word.copy_from_slice(length);
                let length = usize::try_from(u64::from_le_bytes(word)).unwrap_or(usize::MAX);
                let (main, side) = rest.split_at_checked(length).ok_or_else(|| {
                    FeatureError::Window(format!(
                        "window state snapshot says its state takes {length} bytes but only {} follow",
                        rest.len()
                    ))
                })?;
                (main, Some(side))
            }
            other => {
                return Err(FeatureError::Window(format!(
                    "window state snapshot has format version {other}; this build reads 1 to {STATE_VERSION}"
                )))
            }
        };
        // The wire format of `bincode::serialize`, refusing bytes after the value.
        let exact = bincode::DefaultOptions::new()
            .with_fixint_encoding()
            .reject_trailing_bytes();
        let fail =
            |e: bincode::Error| FeatureError::Window(format!("cannot decode window state: {e}"));
        let mut state: KeyedFeatures = exact.deserialize(main).map_err(fail)?;
        let (forgotten, activity) = match side {
            None => (None, KeyActivity::default()),
            Some(side) if version == 2 => (
                Some(exact.deserialize(side).map_err(fail)?),
                KeyActivity::default(),
            ),
            Some(side) => {
                let (forgotten, activity) = exact.deserialize(side).map_err(fail)?;
                (Some(forgotten), activity)
            }
        };
        if let Some(forgotten) = forgotten {
            state.restore_forgotten_sessions(forgotten)?;
        }
        state.activity = activity;
        for windows in &mut state.states {
            state.activity.absorb(windows.take_activity());
        }
        if state.states.len() != job.groups().len() || state.closed.len() != job.groups().len() {
            return Err(FeatureError::Window(format!(
                "the snapshot holds {} window groups but the job has {}",
                state.states.len(),
                job.groups().len()
            )));
        }
        if version < 5 {
            for (windows, group) in state.states.iter_mut().zip(job.groups()) {
                windows.drop_record_count_words(&group.features)?;
            }
        }
        if version < 4 {
            for (windows, group) in state.states.iter_mut().zip(job.groups()) {
                state.changed |= windows.merge_touching_sessions(&group.features);
            }
        }
        Ok(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::AggKind;
    use crate::feature::FeatureSpec;
    use crate::record::Event;
    use crate::row::FeatureRow;
    use crate::test_fixtures::{event, key_ts_schema};
    use crate::vocab::Watermark;
    use crate::window::WindowSpec;
    use std::collections::BTreeMap;

    /// A version 4 snapshot of [`four_features_three_windows`] after the first 200 of
    /// [`records`] ([`run`]), written by `KeyedFeatures::encode` at commit 6949b79.
    const VERSION_4: &[u8] =
        include_bytes!("../../tests/fixtures/state_v4_four_features_three_windows.bin");

    /// `specs` over [`key_ts_schema`]'s records, the primary window tumbling 1 s, `hop`
    /// hopping 2 s every 0.5 s, `session` with a 300 ms gap.
    fn job_of(specs: &[FeatureSpec]) -> Result<JobFeatures> {
        let named = BTreeMap::from([
            (
                "hop".to_owned(),
                WindowSpec::Hopping {
                    size: 2_000,
                    slide: 500,
                },
            ),
            (
                "session".to_owned(),
                WindowSpec::Session {
                    gap: 300,
                    max_length: 5_000,
                },
            ),
        ]);
        let primary = WindowSpec::Tumbling { size: 1_000 };
        JobFeatures::compile(specs, &key_ts_schema()?, &primary, &named)
    }

    /// `name = agg(field) where filter` over `window` (`None`: the primary).
    fn spec(
        name: &str,
        agg: AggKind,
        field: Option<&str>,
        filter: Option<&str>,
        window: Option<&str>,
    ) -> FeatureSpec {
        FeatureSpec {
            name: format!("{name}_{}", window.unwrap_or("tumble")),
            agg,
            field: field.map(str::to_owned),
            filter: filter.map(str::to_owned),
            window: window.map(str::to_owned),
            ..FeatureSpec::default()
        }
    }

    /// One feature `(name, agg, field, filter)`.
    type Feature<'a> = (&'a str, AggKind, Option<&'a str>, Option<&'a str>);

    /// [`job_of`] with each of `features` over each of the three windows.
    fn over_three_windows(features: &[Feature<'_>]) -> Result<JobFeatures> {
        let mut specs = Vec::new();
        for window in [None, Some("hop"), Some("session")] {
            let over =
                |&(name, agg, field, filter): &Feature<'_>| spec(name, agg, field, filter, window);
            specs.extend(features.iter().map(over));
        }
        job_of(&specs)
    }

    /// `count` (without and with `where`), `sum` and `max` over each of the three windows:
    /// every kind of window state that holds slots.
    fn four_features_three_windows() -> Result<JobFeatures> {
        over_three_windows(&[
            ("n", AggKind::Count, None, None),
            ("n_k1", AggKind::Count, None, Some("k == 'k1'")),
            ("sum", AggKind::Sum, Some("ts"), None),
            ("max", AggKind::Max, Some("ts"), None),
        ])
    }

    /// 300 records of 13 keys in nearly increasing time, each at its own offset.
    fn records() -> Vec<Event> {
        (0..300_i64)
            .map(|i| {
                let mut record = event(&format!("k{}", i * 7 % 13), i * 37 + i * i % 50);
                record.position.offset = i;
                record
            })
            .collect()
    }

    /// Applies `records` to `state`, firing at 500 ms behind the latest record after every
    /// 20th, and returns the rows fired.
    fn run(state: &mut KeyedFeatures, job: &JobFeatures, records: &[Event]) -> Vec<FeatureRow> {
        let mut rows = Vec::new();
        for (i, record) in records.iter().enumerate() {
            state.apply(job, record, Watermark::MIN);
            if i % 20 == 19 {
                state.fire(job, Watermark(record.ts - 500), &mut rows);
            }
        }
        rows
    }

    /// Before format 5 a `count` without `where` kept a word of its own in every slot. A
    /// version 4 snapshot restores without them, is written again as format 5, and that goes
    /// on to the rows of a run that never stopped: every count, sum and max of every window
    /// kind, and every revision.
    #[test]
    fn a_version_4_snapshot_restores_without_its_count_words() -> Result<()> {
        let job = four_features_three_windows()?;
        let records = records();
        let (before, after) = records.split_at(200);
        let mut straight = KeyedFeatures::new(&job, 0);
        run(&mut straight, &job, before);
        let from_4 = KeyedFeatures::decode(&job, VERSION_4)?;
        assert_eq!(from_4.open_slots(), straight.open_slots());
        assert!(
            from_4.open_slots() > 13,
            "panes and sessions of every key are open"
        );
        let version_5 = from_4.encode()?;
        assert_eq!(version_5[..4], STATE_VERSION.to_le_bytes());
        let mut restored = KeyedFeatures::decode(&job, &version_5)?;
        let expected = run(&mut straight, &job, after);
        assert_eq!(run(&mut restored, &job, after), expected);
        let mut last = (Vec::new(), Vec::new());
        straight.fire(&job, Watermark::MAX, &mut last.0);
        restored.fire(&job, Watermark::MAX, &mut last.1);
        assert_eq!(last.0, last.1);
        assert!(expected.len() + last.0.len() > 50);
        Ok(())
    }

    /// A version 4 snapshot of other features is refused with the width it should have had,
    /// not restored into wrong values.
    #[test]
    fn a_version_4_snapshot_of_other_features_is_refused() -> Result<()> {
        let other = over_three_windows(&[
            ("n", AggKind::Count, None, None),
            ("sum", AggKind::Sum, Some("ts"), None),
            ("max", AggKind::Max, Some("ts"), None),
        ])?;
        let refused = KeyedFeatures::decode(&other, VERSION_4).map(|_| ());
        let message = refused.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            message.contains("does not hold the 4 accumulator words"),
            "{message}"
        );
        Ok(())
    }

    /// A version 2 snapshot kept each key's last-record time in its window group's own table;
    /// version 3 decodes it into the one table, so TTL expiry goes on as it would have. (The
    /// version 2 bytes are this build's state in version 2's frame: its feature, a `sum`, has
    /// the same words in every version.)
    #[test]
    fn version_2_key_activity_moves_into_the_one_table() -> Result<()> {
        let job = job_of(&[spec("sum", AggKind::Sum, Some("ts"), None, None)])?;
        let mut state = KeyedFeatures::new(&job, 0);
        // Tracking as version 2 did it: in the window group, not in `KeyedFeatures`.
        state.states[0].set_processing_time(1_000);
        for (key, ts) in [("a", 100), ("b", 200)] {
            state.apply(&job, &event(key, ts), Watermark::MIN);
        }
        assert_eq!(
            (state.states[0].tracked_keys(), state.activity.len()),
            (2, 0)
        );
        let mut v2 = 2u32.to_le_bytes().to_vec();
        let main = bincode::serialize(&state).map_err(|e| FeatureError::Window(e.to_string()))?;
        v2.extend((main.len() as u64).to_le_bytes());
        v2.extend(main);
        let forgotten: Vec<Option<&ForgottenSessions>> = vec![None];
        v2.extend(bincode::serialize(&forgotten).map_err(|e| FeatureError::Window(e.to_string()))?);

        let mut restored = KeyedFeatures::decode(&job, &v2)?;
        assert_eq!(restored.states[0].tracked_keys(), 0);
        assert_eq!(restored.activity.len(), 2);
        // Version 3 writes the table beside the state and reads it back.
        let v3 = restored.encode()?;
        assert_eq!(v3[..4], STATE_VERSION.to_le_bytes());
        assert_eq!(KeyedFeatures::decode(&job, &v3)?.activity.len(), 2);
        let mut rows = Vec::new();
        assert_eq!(restored.expire(&job, 1_999, 1_000, &mut rows), 0);
        assert_eq!(restored.expire(&job, 2_000, 1_000, &mut rows), 2);
        assert_eq!(rows.len(), 2);
        Ok(())
    }
}
