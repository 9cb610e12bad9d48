//! The keys of one pane of an aligned window state ([`crate::panes`]) and how a state's
//! panes serialize. Pipeline position: inside the window operator's keyed state.
//!
//! A pane's table keeps each key's [`SlotMeta`] in its entry and the key's accumulator words
//! in the table's column (run M: no 16-byte pointer per slot and no heap block per key). A
//! snapshot still holds each (key, pane) as the slot it was before, then the pane's flag, so
//! snapshot bytes do not depend on where the words live.

use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;

use crate::key_table::{deserialize_entries, KeyTable};
use crate::slot::{Slot, SlotMeta, SlotRef};
use crate::vocab::EventTime;

/// The panes of one start, by key: each key's slot without its words, which the table's
/// column holds. Its flag `dirty()`: updated after one of its windows was emitted.
pub(crate) type PaneKeys = KeyTable<SlotMeta>;

/// Pane start -> key -> pane.
pub(crate) type PaneMaps = BTreeMap<EventTime, PaneKeys>;

/// A pane's serialized form: the slot, then its flag (as when the flag was a field of it).
#[derive(Serialize)]
#[serde(rename = "Pane")]
struct PaneOut<'a> {
    slot: SlotRef<'a>,
    dirty: bool,
}

/// A pane's serialized form, read.
#[derive(Deserialize)]
#[serde(rename = "Pane")]
struct PaneIn {
    slot: Slot,
    dirty: bool,
}

/// One pane's table, serialized as a map of keys to panes.
struct TableOut<'a>(&'a PaneKeys);

impl Serialize for TableOut<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (key, meta, words) in self.0.iter_words() {
            let slot = SlotRef { words, meta };
            map.serialize_entry(
                key,
                &PaneOut {
                    slot,
                    dirty: meta.dirty(),
                },
            )?;
        }
        map.end()
    }
}

/// One pane's table, read from a map of keys to panes.
struct TableIn(PaneKeys);

impl<'de> Deserialize<'de> for TableIn {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let expecting = "a map of keys to their panes";
        let table = deserialize_entries(deserializer, expecting, |table, key, pane: PaneIn| {
            let (words, mut meta) = pane.slot.into_parts();
            meta.set_dirty(pane.dirty);
            table.insert_words(key, meta, &words);
        })?;
        Ok(TableIn(table))
    }
}

/// Writes `panes` as a map of starts to maps of keys to panes (`#[serde(with)]`).
pub(crate) fn serialize<S: Serializer>(panes: &PaneMaps, serializer: S) -> Result<S::Ok, S::Error> {
    let mut map = serializer.serialize_map(Some(panes.len()))?;
    for (start, keys) in panes {
        map.serialize_entry(start, &TableOut(keys))?;
    }
    map.end()
}

/// Reads what [`serialize`] writes (`#[serde(with)]`).
pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<PaneMaps, D::Error> {
    let tables = BTreeMap::<EventTime, TableIn>::deserialize(deserializer)?;
    Ok(tables
        .into_iter()
        .map(|(start, table)| (start, table.0))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_fixtures::{count_feature, event};
    use crate::vocab::Key;

    /// A (key, pane) as it was kept before the words column: a slot and the pane's flag.
    type SlotAndFlag = (Slot, bool);

    /// A state's panes, as `PaneWindows` holds them.
    #[derive(Serialize, Deserialize)]
    struct State(#[serde(with = "super")] PaneMaps);

    /// Panes written from a table's column are the bytes of each (key, pane) written as a
    /// slot of its own and its flag, in place order (a removed key's place taken by the next
    /// new key, with that key's words); they read back to the same bytes.
    #[test]
    fn panes_serialize_as_slots_of_their_own_and_read_back(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let features = count_feature()?;
        let mut panes = PaneMaps::new();
        let mut expected: BTreeMap<EventTime, Vec<(Key, SlotAndFlag)>> = BTreeMap::new();
        for start in [0, 60] {
            let table = panes.entry(start).or_default();
            let slots = expected.entry(start).or_default();
            for i in 0..6_u64 {
                let key = format!("k{i}");
                // Key i holds i + 1 records, so each key's words differ.
                let mut slot = Slot::new(&features, &event(&key, start), i);
                (0..i).for_each(|n| slot.add(&features, &event(&key, start), 10 + n));
                let dirty = i % 2 == 0;
                slot.set_dirty(dirty);
                let (words, meta) = slot.clone().into_parts();
                table.insert_words(Key::from(key.as_str()), meta, &words);
                slots.push((Key::from(key), (slot, dirty)));
            }
            // The place of k1 is freed, k1's words left in it; k9 takes it.
            table.remove(&Key::from("k1"));
            let k9 = Slot::new(&features, &event("k9", start), 99);
            let (words, meta) = k9.clone().into_parts();
            table.insert_words(Key::from("k9"), meta, &words);
            slots[1] = (Key::from("k9"), (k9, false));
        }
        let written = bincode::serialize(&State(panes))?;
        assert_eq!(written, bincode::serialize(&expected)?);
        let back: State = bincode::deserialize(&written)?;
        assert_eq!(bincode::serialize(&back)?, written);
        Ok(())
    }
}
