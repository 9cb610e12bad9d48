//! Where a Kafka source starts when there is no checkpoint (`[source] start`, `weir run
//! --from`): the earliest or latest offsets, the first record at or after a point in time
//! (the broker's offsets-for-times), or explicit offsets per partition. [`StartFrom`] is the
//! setting as written; [`resolve_start`] turns it into one offset per owned partition once the
//! partitions' offset ranges are known. A checkpoint to restore always wins over it.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use weir_features::timestamp::{from_rfc3339, rfc3339_from_millis};
use weir_features::vocab::EventTime;

/// Where a source starts reading when there is no checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartFrom {
    /// The oldest retained offset.
    Earliest,
    /// Only records produced after the job starts.
    Latest,
    /// The first record whose Kafka timestamp is at or after this time (epoch ms); a partition
    /// with none starts at its end.
    Time(EventTime),
    /// These offsets; partitions not listed start at their earliest offset.
    Offsets(BTreeMap<i32, i64>),
}

impl FromStr for StartFrom {
    type Err = String;

    /// `earliest`, `latest`, an RFC 3339 time (`2026-11-30T12:00:00Z`) or per-partition
    /// offsets (`0:1200,1:900`).
    fn from_str(text: &str) -> Result<Self, String> {
        let text = text.trim();
        match text {
            "earliest" => return Ok(StartFrom::Earliest),
            "latest" => return Ok(StartFrom::Latest),
            _ => {}
        }
        let looks_like_offsets = !text.is_empty()
            && text
                .bytes()
                .all(|b| b.is_ascii_digit() || matches!(b, b':' | b',' | b' '));
        if looks_like_offsets {
            return parse_offsets(text).map(StartFrom::Offsets);
        }
        from_rfc3339(text).map(StartFrom::Time).map_err(|e| {
            format!(
                "start `{text}` is not earliest, latest, per-partition offsets like 0:1200,1:900 \
                 or an RFC 3339 time like 2026-11-30T12:00:00Z ({e})"
            )
        })
    }
}

fn parse_offsets(text: &str) -> Result<BTreeMap<i32, i64>, String> {
    let mut offsets = BTreeMap::new();
    for item in text.split(',').map(str::trim) {
        let parsed = item.split_once(':').and_then(|(partition, offset)| {
            Some((
                partition.trim().parse::<i32>().ok()?,
                offset.trim().parse::<i64>().ok()?,
            ))
        });
        let Some((partition, offset)) = parsed else {
            return Err(format!(
                "start offsets `{text}`: `{item}` is not `partition:offset` (e.g. 0:1200,1:900)"
            ));
        };
        if offsets.insert(partition, offset).is_some() {
            return Err(format!(
                "start offsets `{text}` give partition {partition} twice"
            ));
        }
    }
    Ok(offsets)
}

impl fmt::Display for StartFrom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartFrom::Earliest => f.write_str("earliest"),
            StartFrom::Latest => f.write_str("latest"),
            StartFrom::Time(ms) => match rfc3339_from_millis(*ms) {
                Some(text) => f.write_str(&text),
                None => write!(f, "{ms} ms"),
            },
            StartFrom::Offsets(offsets) => {
                let items: Vec<String> = offsets.iter().map(|(p, o)| format!("{p}:{o}")).collect();
                f.write_str(&items.join(","))
            }
        }
    }
}

impl<'de> serde::Deserialize<'de> for StartFrom {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// The offsets of one partition that a start position is resolved against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionRange {
    /// Oldest retained offset.
    pub low: i64,
    /// Offset the next produced record will get (the end).
    pub high: i64,
    /// For [`StartFrom::Time`]: the broker's offsets-for-times answer, `None` when no record
    /// is at or after the time.
    pub at_time: Option<i64>,
}

impl StartFrom {
    /// Checks explicit offsets against the topic's partition count: an offset for a partition
    /// the topic does not have is a mistake, never silently ignored. `what` names the offsets
    /// in the message (`start`, `stop`).
    pub fn check_partitions(
        &self,
        what: &str,
        topic: &str,
        partitions: usize,
    ) -> Result<(), String> {
        if let StartFrom::Offsets(offsets) = self {
            let missing: Vec<i32> = offsets
                .keys()
                .copied()
                .filter(|&p| p < 0 || p as usize >= partitions)
                .collect();
            if !missing.is_empty() {
                return Err(format!(
                    "{what} offsets name partition(s) {missing:?}, but {topic} has {partitions} \
                     partition(s) (0..{partitions})"
                ));
            }
        }
        Ok(())
    }
}

/// The first offset to read of `partition` for `start`, given its offset range.
pub fn resolve_start(
    start: &StartFrom,
    topic: &str,
    partition: i32,
    range: PartitionRange,
) -> Result<i64, String> {
    match start {
        StartFrom::Earliest => Ok(range.low),
        StartFrom::Latest => Ok(range.high),
        StartFrom::Time(_) => Ok(range
            .at_time
            .unwrap_or(range.high)
            .clamp(range.low, range.high)),
        StartFrom::Offsets(offsets) => match offsets.get(&partition) {
            None => Ok(range.low),
            Some(&offset) if offset > range.high => Err(format!(
                "start offset {offset} of {topic}/{partition} is beyond its end ({}); the \
                 partition holds offsets {}..{}",
                range.high, range.low, range.high
            )),
            Some(&offset) if offset < range.low => Err(format!(
                "start offset {offset} of {topic}/{partition} is before its earliest retained \
                 offset {} (deleted by retention); the partition holds offsets {}..{}",
                range.low, range.low, range.high
            )),
            Some(&offset) => Ok(offset),
        },
    }
}

/// The end (exclusive) of a bounded read of `partition` that stops at `stop` (`weir replay
/// --to`): a time ends before the first record at or after it, explicit offsets end there (a
/// partition they do not name is read to its end), `earliest` reads nothing and `latest` reads
/// to the end; never past the end the partition had at start.
pub fn resolve_stop(stop: &StartFrom, partition: i32, range: PartitionRange) -> i64 {
    let end = match stop {
        StartFrom::Earliest => range.low,
        StartFrom::Latest => range.high,
        StartFrom::Time(_) => range.at_time.unwrap_or(range.high),
        StartFrom::Offsets(offsets) => offsets.get(&partition).copied().unwrap_or(range.high),
    };
    end.clamp(range.low, range.high)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_ends_before_its_time_or_offset_and_never_past_the_end() {
        let range = |at_time| PartitionRange {
            low: 10,
            high: 100,
            at_time,
        };
        let stop = |s: &str| s.parse::<StartFrom>().expect("stop");
        let at = stop("2026-11-30T12:00:00Z");
        assert_eq!(resolve_stop(&at, 0, range(Some(40))), 40);
        assert_eq!(
            resolve_stop(&at, 0, range(None)),
            100,
            "no record at or after it"
        );
        let offsets = stop("0:50,1:500,2:3");
        assert_eq!(resolve_stop(&offsets, 0, range(None)), 50);
        assert_eq!(
            resolve_stop(&offsets, 1, range(None)),
            100,
            "clamped to the end"
        );
        assert_eq!(
            resolve_stop(&offsets, 2, range(None)),
            10,
            "clamped to the start"
        );
        assert_eq!(
            resolve_stop(&offsets, 3, range(None)),
            100,
            "not named: to the end"
        );
        assert_eq!(resolve_stop(&StartFrom::Earliest, 0, range(None)), 10);
        assert_eq!(resolve_stop(&StartFrom::Latest, 0, range(None)), 100);
    }

    #[test]
    fn parses_every_form_and_prints_it_back() {
        for (text, want) in [
            ("earliest", StartFrom::Earliest),
            ("latest", StartFrom::Latest),
            ("2026-11-30T12:00:00Z", StartFrom::Time(1_796_040_000_000)),
            (
                "2026-11-30T13:00:00+01:00",
                StartFrom::Time(1_796_040_000_000),
            ),
            (
                "0:1200, 1:900",
                StartFrom::Offsets(BTreeMap::from([(0, 1200), (1, 900)])),
            ),
            ("3:0", StartFrom::Offsets(BTreeMap::from([(3, 0)]))),
        ] {
            assert_eq!(text.parse::<StartFrom>(), Ok(want.clone()), "{text}");
            assert_eq!(want.to_string().parse::<StartFrom>(), Ok(want), "{text}");
        }
    }

    #[test]
    fn refuses_what_is_not_a_start() {
        for (text, needle) in [
            ("yesterday", "RFC 3339 time like 2026-11-30T12:00:00Z"),
            ("2026-11-30T12:00:00", "not an RFC 3339 date-time"),
            ("2026-13-01T00:00:00Z", "RFC 3339"),
            ("0:12,1", "`1` is not `partition:offset`"),
            ("0:12,0:13", "partition 0 twice"),
            ("0:99999999999999999999", "not `partition:offset`"),
            ("", "not earliest, latest"),
        ] {
            let got = text.parse::<StartFrom>();
            assert!(
                got.as_ref().is_err_and(|e| e.contains(needle)),
                "{text:?}: {got:?}"
            );
        }
    }

    #[test]
    fn offsets_must_name_existing_partitions() {
        let start = StartFrom::Offsets(BTreeMap::from([(0, 1), (4, 1)]));
        let err = start
            .check_partitions("start", "t", 4)
            .err()
            .unwrap_or_default();
        assert!(
            err.contains("start offsets name partition(s) [4], but t has 4"),
            "{err}"
        );
        assert_eq!(start.check_partitions("start", "t", 5), Ok(()));
        assert_eq!(StartFrom::Earliest.check_partitions("stop", "t", 1), Ok(()));
    }

    #[test]
    fn resolves_against_the_partition_range() {
        let range = PartitionRange {
            low: 10,
            high: 50,
            at_time: Some(30),
        };
        let offsets = StartFrom::Offsets(BTreeMap::from([(0, 20), (1, 51), (2, 9), (3, 50)]));
        assert_eq!(resolve_start(&StartFrom::Earliest, "t", 0, range), Ok(10));
        assert_eq!(resolve_start(&StartFrom::Latest, "t", 0, range), Ok(50));
        assert_eq!(resolve_start(&StartFrom::Time(5), "t", 0, range), Ok(30));
        let none_after = PartitionRange {
            at_time: None,
            ..range
        };
        assert_eq!(
            resolve_start(&StartFrom::Time(5), "t", 0, none_after),
            Ok(50)
        );
        assert_eq!(resolve_start(&offsets, "t", 0, range), Ok(20));
        assert_eq!(resolve_start(&offsets, "t", 3, range), Ok(50));
        assert_eq!(resolve_start(&offsets, "t", 7, range), Ok(10));
        let beyond = resolve_start(&offsets, "t", 1, range);
        assert!(
            beyond
                .as_ref()
                .is_err_and(|e| e.contains("beyond its end (50)")),
            "{beyond:?}"
        );
        let before = resolve_start(&offsets, "t", 2, range);
        assert!(
            before
                .as_ref()
                .is_err_and(|e| e.contains("before its earliest")),
            "{before:?}"
        );
    }
}
