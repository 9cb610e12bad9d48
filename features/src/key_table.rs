//! The keys of one pane ([`crate::panes`]) or of one session window definition
//! ([`crate::sessions`]) with their state: entries in dense storage that grows chunk by
//! chunk, found through a hash index of 4-byte positions. Pipeline position: inside the
//! window operator's keyed state (and the batch `weir features` command's).
//!
//! Why not a hash map of (key, state) entries (issue #18, run M): a hash table is at most 7/8
//! full and doubles as it grows, so 12–56 % of its buckets are empty, and each empty bucket
//! is as large as an entry (a pane's key and slot: 88 bytes). Here an empty bucket is 4
//! bytes, and the entries never move: once past the first doubling chunks, at most one
//! chunk ([`CHUNK_BYTES`]) is partly filled, and a removed key's place waits for the next
//! new key. A lookup reads the index, then the entry. A table may keep a fixed number of
//! words beside each entry ([`Column`]: a pane's accumulator words), found by the entry's
//! place.

use hashbrown::HashTable;
use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::hash::BuildHasher;
use std::marker::PhantomData;

use crate::vocab::Key;

/// In-memory hash for keys; never persisted or routed (those use the seeded key-group hash).
pub(crate) type FastHash = rustc_hash::FxBuildHasher;

/// The key's hash in every [`KeyTable`].
#[inline]
pub(crate) fn key_hash(key: &Key) -> u64 {
    FastHash::default().hash_one(key)
}

/// Whether two keys (or other short strings: a predicate's string field and literal) are
/// equal, as `a == b` is. Equal lengths are compared as two fixed-size words (of 1, 4, 8 or
/// 16 bytes) that overlap in the middle, where `==` calls `memcmp`: 1.3–1.5 % of a hopping
/// run's samples, from looking records' keys up, telling a firing's keys apart and matching
/// `where` predicates (BENCHMARKS.md, F, fix 74).
#[inline]
pub(crate) fn same_key(a: &Key, b: &Key) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let n = a.len();
    if n != b.len() {
        return false;
    }
    /// The `W` bytes at `at` of `text`.
    #[inline(always)]
    fn word<const W: usize>(text: &[u8], at: usize) -> [u8; W] {
        text[at..at + W].try_into().unwrap_or([0; W])
    }
    match n {
        0 => true,
        1..=3 => a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1],
        4..=7 => word::<4>(a, 0) == word::<4>(b, 0) && word::<4>(a, n - 4) == word::<4>(b, n - 4),
        8..=15 => word::<8>(a, 0) == word::<8>(b, 0) && word::<8>(a, n - 8) == word::<8>(b, n - 8),
        16..=32 => {
            word::<16>(a, 0) == word::<16>(b, 0) && word::<16>(a, n - 16) == word::<16>(b, n - 16)
        }
        _ => a == b,
    }
}

/// Entries of the first chunk; each next chunk holds twice as many, up to [`CHUNK_BYTES`].
const FIRST_CHUNK: usize = 4;

/// The most bytes of entries one chunk holds (a power of two of entries, at least
/// [`FIRST_CHUNK`]).
const CHUNK_BYTES: usize = 32 << 10;

/// The doubling chunks of a layout whose full chunks hold `full` values (a power of two, at
/// least [`FIRST_CHUNK`]): `FIRST_CHUNK << k` for `k` below this, then `full` each.
#[inline]
fn growing_chunks(full: usize) -> usize {
    (full.ilog2() - FIRST_CHUNK.ilog2() + 1) as usize
}

/// Chunk `k`'s room in the layout of [`growing_chunks`].
fn room_in(k: usize, full: usize) -> usize {
    if k < growing_chunks(full) {
        FIRST_CHUNK << k
    } else {
        full
    }
}

/// The chunk and the place in it of value `at` in the layout of [`growing_chunks`].
#[inline]
fn locate_in(at: usize, full: usize) -> (usize, usize) {
    let growing = growing_chunks(full);
    let growing_len = FIRST_CHUNK * ((1 << growing) - 1);
    if at < growing_len {
        let k = (at / FIRST_CHUNK + 1).ilog2() as usize;
        (k, at - FIRST_CHUNK * ((1 << k) - 1))
    } else {
        // `full` is a power of two: a shift and a mask, where dividing by a column's `full`,
        // known only at run time, would be a `div` instruction on every access.
        let past = at - growing_len;
        (growing + (past >> full.trailing_zeros()), past & (full - 1))
    }
}

/// Values of type `T` in chunks that never reallocate: chunk `k` holds `FIRST_CHUNK << k`
/// values up to [`Chunks::FULL`], then every chunk holds `FULL`. Chunks emptied by `clear`
/// or removals keep their memory for the values that come next.
struct Chunks<T> {
    chunks: Vec<Vec<T>>,
    len: usize,
}

impl<T> Chunks<T> {
    /// Values in a full-size chunk: the largest power of two whose values fit in
    /// [`CHUNK_BYTES`].
    const FULL: usize = {
        let fit = CHUNK_BYTES
            / if size_of::<T>() == 0 {
                1
            } else {
                size_of::<T>()
            };
        let pow = if fit == 0 { 1 } else { 1 << fit.ilog2() };
        if pow < FIRST_CHUNK {
            FIRST_CHUNK
        } else {
            pow
        }
    };

    fn new() -> Self {
        Chunks {
            chunks: Vec::new(),
            len: 0,
        }
    }

    /// Chunk `k`'s room.
    fn room(k: usize) -> usize {
        room_in(k, Self::FULL)
    }

    /// The chunk and the place in it of the value at `at`.
    #[inline]
    fn locate(at: usize) -> (usize, usize) {
        locate_in(at, Self::FULL)
    }

    #[inline]
    fn get(&self, at: usize) -> &T {
        let (k, i) = Self::locate(at);
        &self.chunks[k][i]
    }

    #[inline]
    fn get_mut(&mut self, at: usize) -> &mut T {
        let (k, i) = Self::locate(at);
        &mut self.chunks[k][i]
    }

    /// Appends `value`, returning its place.
    fn push(&mut self, value: T) -> usize {
        let at = self.len;
        let (k, _) = Self::locate(at);
        if k == self.chunks.len() {
            self.chunks.push(Vec::with_capacity(Self::room(k)));
        }
        self.chunks[k].push(value);
        self.len += 1;
        at
    }

    /// Drops every value, keeping the chunks' memory.
    fn clear(&mut self) {
        self.chunks.iter_mut().for_each(Vec::clear);
        self.len = 0;
    }

    fn iter(&self) -> impl Iterator<Item = &T> {
        self.chunks.iter().flatten()
    }

    fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.chunks.iter_mut().flatten()
    }
}

/// A copy of the chunks in use, each with its full room, so the copy grows as the original
/// does.
impl<T: Clone> Clone for Chunks<T> {
    fn clone(&self) -> Self {
        let in_use = self
            .len
            .checked_sub(1)
            .map_or(0, |last| Self::locate(last).0 + 1);
        let chunks = self.chunks[..in_use]
            .iter()
            .enumerate()
            .map(|(k, chunk)| {
                let mut copy = Vec::with_capacity(Self::room(k));
                copy.extend(chunk.iter().cloned());
                copy
            })
            .collect();
        Chunks {
            chunks,
            len: self.len,
        }
    }
}

/// The most bytes of words one chunk of a [`Column`] holds: a small allocation in
/// jemalloc's size classes (they end at 14 KiB), where a chunk as long as its entries' chunk
/// (256 places of 10 words for run F's job: 20 KiB) would be a block of whole pages.
const COLUMN_CHUNK_BYTES: usize = 8 << 10;

/// A fixed number of words per place beside a table's entries (a pane's accumulator words,
/// [`crate::panes`]), in chunks of their own that double up to [`COLUMN_CHUNK_BYTES`] and
/// never move: the table holds them without a pointer per entry or a heap block per key
/// (run M). Width 0 (a table without words) allocates nothing.
#[derive(Clone)]
struct Column {
    width: usize,
    /// Places in a full chunk ([`locate_in`]).
    full: usize,
    /// Each with room for its places, filled as far as the places in use (a table's last
    /// chunk touches no pages its places do not use).
    chunks: Vec<Vec<u64>>,
}

impl Default for Column {
    fn default() -> Self {
        Column::new(0)
    }
}

impl Column {
    /// A column of `width` words per place.
    fn new(width: usize) -> Self {
        let fit = COLUMN_CHUNK_BYTES / (width.max(1) * size_of::<u64>());
        Column {
            width,
            full: (1 << fit.max(1).ilog2()).max(FIRST_CHUNK),
            chunks: Vec::new(),
        }
    }

    /// The words of place `at`, which [`Self::reach`] made room for (none for width 0).
    #[inline]
    fn get(&self, at: usize) -> &[u64] {
        let (k, i) = locate_in(at, self.full);
        match self.chunks.get(k) {
            Some(chunk) => &chunk[i * self.width..(i + 1) * self.width],
            None => &[],
        }
    }

    #[inline]
    fn get_mut(&mut self, at: usize) -> &mut [u64] {
        let (k, i) = locate_in(at, self.full);
        let width = self.width;
        match self.chunks.get_mut(k) {
            Some(chunk) => &mut chunk[i * width..(i + 1) * width],
            None => &mut [],
        }
    }

    /// Makes room for the words of place `at`, the place after the last one in use.
    fn reach(&mut self, at: usize) {
        if self.width == 0 {
            return;
        }
        let (k, i) = locate_in(at, self.full);
        while self.chunks.len() <= k {
            let places = room_in(self.chunks.len(), self.full);
            self.chunks.push(Vec::with_capacity(places * self.width));
        }
        self.chunks[k].resize((i + 1) * self.width, 0);
    }

    /// Forgets every place's words, keeping the chunks' memory.
    fn clear(&mut self) {
        self.chunks.iter_mut().for_each(Vec::clear);
    }

    /// The words of each place in use, in place order (endless empty ones for width 0).
    fn slices(&self) -> impl Iterator<Item = &[u64]> {
        let width = self.width.max(1);
        let words = self.chunks.iter().flat_map(move |c| c.chunks_exact(width));
        let endless = if self.width == 0 { usize::MAX } else { 0 };
        words.chain(std::iter::repeat_n(&[][..], endless))
    }
}

/// Keys and their values, in the order of their places (a new key takes the last freed
/// place, else the next one). Serialized as a map, as the hash map it replaced.
#[derive(Clone)]
pub(crate) struct KeyTable<V> {
    /// Places in `entries`, by the key's [`key_hash`].
    index: HashTable<u32>,
    /// Entries by place, a removed one's place empty (`None`: no bigger than an entry, the
    /// key's niche holds it) until a new key takes it.
    entries: Chunks<Option<(Key, V)>>,
    /// Words of each place ([`Column`]), for the tables that keep them.
    words: Column,
    /// Empty places, the last freed first.
    free: Vec<u32>,
    /// Entries held (places less `free`).
    len: usize,
}

impl<V> Default for KeyTable<V> {
    fn default() -> Self {
        KeyTable {
            index: HashTable::new(),
            entries: Chunks::new(),
            words: Column::default(),
            free: Vec::new(),
            len: 0,
        }
    }
}

/// Where an entry is. An entry keeps its place until it is removed; the place may then
/// hold another key, or none. Four bytes, as in the index (a session timer holds one).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Place(u32);

/// `at` in the index's 4 bytes. A table of 2^32 entries would hold hundreds of GB.
fn narrow(at: usize) -> u32 {
    u32::try_from(at).unwrap_or_else(|_| panic!("a key table holds at most 2^32 keys"))
}

/// The key at `at` (a place in use: below `entries.len`), if the place holds one.
#[inline]
fn key_at<V>(entries: &Chunks<Option<(Key, V)>>, at: u32) -> Option<&Key> {
    entries.get(at as usize).as_ref().map(|(key, _)| key)
}

/// Whether the entry at `at` holds `key`: the index's match in a lookup and an insert.
#[inline]
fn holds_key<V>(entries: &Chunks<Option<(Key, V)>>, at: u32, key: &Key) -> bool {
    key_at(entries, at).is_some_and(|k| same_key(k, key))
}

/// The hash of the key at `at`, for the index to grow by.
fn hash_at<V>(entries: &Chunks<Option<(Key, V)>>, at: u32) -> u64 {
    key_at(entries, at).map_or(0, key_hash)
}

impl<V> KeyTable<V> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Keeps `width` words beside each entry from now on ([`Self::words_mut`]); a table
    /// holding entries keeps the width it has.
    pub fn keep_words(&mut self, width: usize) {
        if self.words.chunks.is_empty() && self.words.width != width {
            self.words = Column::new(width);
        }
        debug_assert_eq!(self.words.width, width, "one table, one width");
    }

    /// The words beside the entry at `place`.
    #[inline]
    pub fn words_at(&self, place: Place) -> &[u64] {
        self.words.get(place.0 as usize)
    }

    /// The value and the words of the entry at `place`, which holds one (from
    /// [`Self::find_or_insert_with`] or [`Self::place`], no removal since).
    #[inline]
    pub fn words_mut(&mut self, place: Place) -> (&mut V, &mut [u64]) {
        match self.entries.get_mut(place.0 as usize) {
            Some((_, value)) => (value, self.words.get_mut(place.0 as usize)),
            None => unreachable!("a place holds its entry until it is removed"),
        }
    }

    /// [`Self::find_or_insert_with`] in a table that keeps `empty.len()` words per entry:
    /// `key`'s value and words, a new key's words set to `empty`.
    #[inline]
    pub fn find_or_insert_words(
        &mut self,
        hash: u64,
        key: &Key,
        empty: &[u64],
        make: impl FnOnce() -> V,
    ) -> (&mut V, &mut [u64], bool) {
        self.keep_words(empty.len());
        let (at, new) = self.find_or_insert_place(hash, key, make);
        let (value, words) = self.words_mut(at);
        if new {
            words.copy_from_slice(empty);
        }
        (value, words, new)
    }

    /// Entries with their words, in place order.
    pub fn iter_words(&self) -> impl Iterator<Item = (&Key, &V, &[u64])> {
        let entries = self.entries.iter().zip(self.words.slices());
        entries.filter_map(|(entry, words)| {
            let (key, value) = entry.as_ref()?;
            Some((key, value, words))
        })
    }

    /// `key`'s value and words, `hash` being its [`key_hash`].
    #[inline]
    pub fn get_hashed_words(&self, hash: u64, key: &Key) -> Option<(&V, &[u64])> {
        let at = self.place(hash, key)?;
        let (_, value) = self.entries.get(at.0 as usize).as_ref()?;
        Some((value, self.words_at(at)))
    }

    /// Sets `key`'s value and words (a table that keeps `words.len()` words).
    pub fn insert_words(&mut self, key: Key, value: V, words: &[u64]) {
        self.keep_words(words.len());
        let (place, _) = self.insert_place(key, value);
        self.words_mut(place).1.copy_from_slice(words);
    }

    /// Replaces every entry's words with `convert`'s of them, `width` words each (state
    /// decoded from an older snapshot layout); places stay. `None` when `convert` refuses
    /// an entry's words or gives other than `width`, the table then unchanged.
    pub fn convert_words(
        &mut self,
        width: usize,
        mut convert: impl FnMut(&[u64]) -> Option<Box<[u64]>>,
    ) -> Option<()> {
        let mut column = Column::new(width);
        let places = self.entries.iter().zip(self.words.slices());
        for (at, (entry, words)) in places.enumerate() {
            column.reach(at);
            if entry.is_some() {
                let converted = convert(words).filter(|w| w.len() == width)?;
                column.get_mut(at).copy_from_slice(&converted);
            }
        }
        self.words = column;
        Some(())
    }

    /// Moves every entry of `other` (its keys not in this table) here, with its words.
    pub fn absorb_words(&mut self, other: KeyTable<V>) {
        self.reserve(other.len());
        let KeyTable { entries, words, .. } = other;
        let in_use = entries.chunks.into_iter().flatten().zip(words.slices());
        for (entry, words) in in_use {
            if let Some((key, value)) = entry {
                self.insert_words(key, value, words);
            }
        }
    }

    /// Keys the index holds without growing.
    #[cfg(test)]
    pub fn capacity(&self) -> usize {
        self.index.capacity()
    }

    /// Makes room in the index for `more` keys (the entries grow chunk by chunk and never
    /// move, so they need no room made ahead).
    pub fn reserve(&mut self, more: usize) {
        let entries = &self.entries;
        self.index.reserve(more, |&at| hash_at(entries, at));
    }

    /// Drops every entry, keeping the memory for the next ones.
    pub fn clear(&mut self) {
        self.index.clear();
        self.entries.clear();
        self.words.clear();
        self.free.clear();
        self.len = 0;
    }

    /// The place of `key`, whose [`key_hash`] is `hash`.
    #[inline]
    pub fn place(&self, hash: u64, key: &Key) -> Option<Place> {
        let entries = &self.entries;
        self.index
            .find(hash, |&at| holds_key(entries, at, key))
            .map(|&at| Place(at))
    }

    /// The value at `place`, which holds an entry (from [`Self::place`], no removal since).
    #[inline]
    pub fn at_mut(&mut self, place: Place) -> &mut V {
        match self.entries.get_mut(place.0 as usize) {
            Some((_, value)) => value,
            None => unreachable!("a place holds its entry until it is removed"),
        }
    }

    /// The key at `place`, if it holds one.
    #[inline]
    pub fn key_at(&self, place: Place) -> Option<&Key> {
        if place.0 as usize >= self.entries.len {
            return None;
        }
        key_at(&self.entries, place.0)
    }

    /// The entry at `place`, if it holds one.
    #[inline]
    pub fn entry_at_mut(&mut self, place: Place) -> Option<(&Key, &mut V)> {
        if place.0 as usize >= self.entries.len {
            return None;
        }
        let (key, value) = self.entries.get_mut(place.0 as usize).as_mut()?;
        Some((&*key, value))
    }

    /// `key`'s value, `hash` being its [`key_hash`].
    #[cfg(test)]
    pub fn get_hashed(&self, hash: u64, key: &Key) -> Option<&V> {
        let at = self.place(hash, key)?;
        self.entries
            .get(at.0 as usize)
            .as_ref()
            .map(|(_, value)| value)
    }

    /// Puts a new entry in the last freed place, or after the last one.
    fn put(&mut self, entry: (Key, V)) -> usize {
        self.len += 1;
        match self.free.pop() {
            Some(at) => {
                *self.entries.get_mut(at as usize) = Some(entry);
                at as usize
            }
            None => {
                let at = self.entries.push(Some(entry));
                self.words.reach(at);
                at
            }
        }
    }

    /// The place the next new entry takes.
    fn next_place(&self) -> u32 {
        self.free
            .last()
            .copied()
            .unwrap_or_else(|| narrow(self.entries.len))
    }

    /// `key`'s place and value (`hash` its [`key_hash`]), the value made by `make` if the
    /// key is new; the flag says whether it was. The key is cloned only when new.
    #[inline]
    pub fn find_or_insert_with(
        &mut self,
        hash: u64,
        key: &Key,
        make: impl FnOnce() -> V,
    ) -> (Place, &mut V, bool) {
        let (at, new) = self.find_or_insert_place(hash, key, make);
        (at, self.at_mut(at), new)
    }

    /// `key`'s place (`hash` its [`key_hash`]), a new entry's value made by `make`, and
    /// whether it is new.
    #[inline]
    fn find_or_insert_place(
        &mut self,
        hash: u64,
        key: &Key,
        make: impl FnOnce() -> V,
    ) -> (Place, bool) {
        let (entries, next) = (&self.entries, self.next_place());
        let found = self.index.entry(
            hash,
            |&at| holds_key(entries, at, key),
            |&at| hash_at(entries, at),
        );
        let (at, new) = match found {
            hashbrown::hash_table::Entry::Occupied(entry) => (Place(*entry.get()), false),
            hashbrown::hash_table::Entry::Vacant(entry) => {
                entry.insert(next);
                (Place(narrow(self.put((key.clone(), make())))), true)
            }
        };
        (at, new)
    }

    /// Sets `key`'s value, returning the one it replaces.
    pub fn insert(&mut self, key: Key, value: V) -> Option<V> {
        self.insert_place(key, value).1
    }

    /// Sets `key`'s value: its place, and the value it replaces.
    fn insert_place(&mut self, key: Key, value: V) -> (Place, Option<V>) {
        let hash = key_hash(&key);
        if let Some(at) = self.place(hash, &key) {
            return (at, Some(std::mem::replace(self.at_mut(at), value)));
        }
        let (entries, next) = (&self.entries, self.next_place());
        self.index
            .insert_unique(hash, next, |&at| hash_at(entries, at));
        (Place(narrow(self.put((key, value)))), None)
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: &Key) -> Option<V> {
        let at = self.place(key_hash(key), key)?;
        self.remove_at(at)
    }

    /// Removes the entry at `place`, returning its value. Nothing moves: the place is free
    /// for the next new key. A place holding no entry (beyond the places in use, or freed)
    /// removes nothing.
    pub fn remove_at(&mut self, Place(at): Place) -> Option<V> {
        let at = at as usize;
        if at >= self.entries.len {
            return None;
        }
        let (key, value) = self.entries.get_mut(at).take()?;
        self.freed(at, &key);
        Some(value)
    }

    /// Counts the entry of `key` just taken from `at` out: drops its place from the index
    /// and frees it; an emptied table starts again from the first place, in the chunks
    /// already allocated.
    fn freed(&mut self, at: usize, key: &Key) {
        if let Ok(found) = self.index.find_entry(key_hash(key), |&p| p as usize == at) {
            found.remove();
        }
        self.len -= 1;
        if self.len == 0 {
            self.entries.clear();
            self.words.clear();
            self.free.clear();
        } else {
            self.free.push(narrow(at));
        }
    }

    /// Keeps the entries `keep` accepts; the others' places are freed.
    pub fn retain(&mut self, mut keep: impl FnMut(&Key, &mut V) -> bool) {
        for at in 0..self.entries.len {
            let entry = self.entries.get_mut(at);
            if entry.as_mut().is_none_or(|(key, value)| keep(key, value)) {
                continue;
            }
            if let Some((key, _)) = entry.take() {
                self.freed(at, &key);
                if self.len == 0 {
                    return;
                }
            }
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Key, &V)> {
        self.entries
            .iter()
            .filter_map(|entry| entry.as_ref().map(|(key, value)| (key, value)))
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&Key, &mut V)> {
        self.entries
            .iter_mut()
            .filter_map(|entry| entry.as_mut().map(|(key, value)| (&*key, value)))
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.iter().map(|(_, value)| value)
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.iter_mut().map(|(_, value)| value)
    }
}

impl<V> IntoIterator for KeyTable<V> {
    type Item = (Key, V);
    type IntoIter =
        std::iter::Flatten<std::iter::Flatten<std::vec::IntoIter<Vec<Option<(Key, V)>>>>>;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.chunks.into_iter().flatten().flatten()
    }
}

impl<V> Extend<(Key, V)> for KeyTable<V> {
    fn extend<I: IntoIterator<Item = (Key, V)>>(&mut self, entries: I) {
        let entries = entries.into_iter();
        self.reserve(entries.size_hint().0);
        for (key, value) in entries {
            self.insert(key, value);
        }
    }
}

impl<V: fmt::Debug> fmt::Debug for KeyTable<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<V: Serialize> Serialize for KeyTable<V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.len()))?;
        for (key, value) in self.iter() {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for KeyTable<V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserialize_entries(
            deserializer,
            "a map of keys to their state",
            |table, key, value| {
                table.insert(key, value);
            },
        )
    }
}

/// Reads a map of keys to entries of type `T` into a table, each entry put there by `put`
/// (a table's own entries, or a pane's, which also carry words: [`crate::pane_table`]);
/// `expecting` names the map in an error.
pub(crate) fn deserialize_entries<'de, D, V, T>(
    deserializer: D,
    expecting: &'static str,
    put: impl FnMut(&mut KeyTable<V>, Key, T),
) -> Result<KeyTable<V>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct Entries<V, T, P>(&'static str, P, PhantomData<(V, T)>);

    impl<'de, V, T, P> Visitor<'de> for Entries<V, T, P>
    where
        T: Deserialize<'de>,
        P: FnMut(&mut KeyTable<V>, Key, T),
    {
        type Value = KeyTable<V>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }

        fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut table = KeyTable::default();
            // A length read from the input is a hint, not a promise: room for at most
            // 4 096 keys up front.
            table.reserve(map.size_hint().unwrap_or(0).min(4096));
            while let Some((key, entry)) = map.next_entry()? {
                (self.1)(&mut table, key, entry);
            }
            Ok(table)
        }
    }

    deserializer.deserialize_map(Entries(expecting, put, PhantomData))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: usize) -> Key {
        Key::from(format!("k{i}"))
    }

    #[test]
    fn same_key_agrees_with_equality_at_every_length_and_difference() {
        let text: String = (0..40u8).map(|i| char::from(b'a' + i % 26)).collect();
        for n in 0..=text.len() {
            let a = Key::from(&text[..n]);
            assert!(same_key(&a, &a.clone()), "{n}");
            // One byte changed, at every place.
            for at in 0..n {
                let mut other = text.as_bytes()[..n].to_vec();
                other[at] = b'#';
                let b = Key::from(std::str::from_utf8(&other).unwrap_or_default());
                assert_eq!(same_key(&a, &b), a == b, "{n} bytes, changed at {at}");
            }
            // Another length, sharing the prefix.
            for m in [n.saturating_sub(1), n + 1] {
                let b = Key::from(&text[..m.min(text.len())]);
                assert_eq!(same_key(&a, &b), a == b, "{n} against {m} bytes");
            }
        }
    }

    /// Every place maps to a chunk and a place in it that the chunks' rooms agree with:
    /// consecutive, each chunk filled before the next.
    #[test]
    fn places_fill_each_chunk_in_turn() {
        fn check<T>() {
            let (mut k, mut i) = (0, 0);
            for at in 0..20_000 {
                assert_eq!(Chunks::<T>::locate(at), (k, i), "place {at}");
                i += 1;
                if i == Chunks::<T>::room(k) {
                    (k, i) = (k + 1, 0);
                }
            }
        }
        check::<u8>();
        check::<(Key, [u64; 11])>();
        check::<[u8; 100_000]>();
        assert_eq!(Chunks::<[u8; 112]>::FULL, 256);
        assert_eq!(Chunks::<[u8; 100_000]>::FULL, FIRST_CHUNK);
    }

    /// Inserts, lookups, replacements, removals and retains agree with a `HashMap` doing the
    /// same, across many chunks, and the iteration holds the same entries.
    #[test]
    fn agrees_with_a_hash_map() {
        let mut table = KeyTable::default();
        let mut map = std::collections::HashMap::new();
        let mut state = 7_u64;
        for step in 0..60_000_u64 {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let k = key((state >> 40) as usize % 3_000);
            match state % 5 {
                0 => assert_eq!(table.remove(&k), map.remove(&k), "step {step}"),
                1 => assert_eq!(table.insert(k.clone(), step), map.insert(k, step)),
                2 => {
                    let (_, value, new) = table.find_or_insert_with(key_hash(&k), &k, || step);
                    assert_eq!(new, !map.contains_key(&k));
                    *value += 1;
                    *map.entry(k).or_insert(step) += 1;
                }
                _ => assert_eq!(table.get_hashed(key_hash(&k), &k), map.get(&k)),
            }
            if step % 5_000 == 4_999 {
                let parity = step / 5_000 % 2;
                table.retain(|_, v| *v % 2 == parity);
                map.retain(|_, v| *v % 2 == parity);
            }
            assert_eq!(table.len(), map.len());
        }
        let mut entries: Vec<(Key, u64)> = table.iter().map(|(k, v)| (k.clone(), *v)).collect();
        let mut expected: Vec<(Key, u64)> = map.into_iter().collect();
        entries.sort();
        expected.sort();
        assert_eq!(entries, expected);
    }

    /// An empty place costs no byte more than an entry: the key's niche marks it.
    #[test]
    fn an_empty_place_is_no_bigger_than_an_entry() {
        assert_eq!(size_of::<Option<(Key, u32)>>(), size_of::<(Key, u32)>());
        assert_eq!(
            size_of::<Option<(Key, [u64; 11])>>(),
            size_of::<(Key, [u64; 11])>()
        );
    }

    /// A removed key's place is the next new key's, and a table emptied starts again at
    /// the first place: neither grows the entries.
    #[test]
    fn removed_places_are_taken_again() {
        let mut table = KeyTable::default();
        (0..100).for_each(|i| _ = table.insert(key(i), i));
        for i in (0..100).step_by(2) {
            assert_eq!(table.remove(&key(i)), Some(i));
        }
        (100..150).for_each(|i| _ = table.insert(key(i), i));
        assert_eq!((table.len(), table.entries.len), (100, 100));
        (0..200).for_each(|i| _ = table.remove(&key(i)));
        assert!(table.is_empty());
        assert_eq!((table.entries.len, table.free.len()), (0, 0));
        table.insert(key(7), 7);
        assert_eq!(table.iter().collect::<Vec<_>>(), [(&key(7), &7)]);
    }

    /// `retain` keeps the accepted entries in their order and finds them after.
    #[test]
    fn retain_keeps_order_and_lookups() {
        let mut table = KeyTable::default();
        for i in 0..1_000 {
            table.insert(key(i), i);
        }
        table.retain(|_, v| *v % 3 == 0);
        let kept: Vec<usize> = table.values().copied().collect();
        assert_eq!(kept, (0..1_000).filter(|i| i % 3 == 0).collect::<Vec<_>>());
        for i in 0..1_000 {
            let found = table.get_hashed(key_hash(&key(i)), &key(i)).copied();
            assert_eq!(found, (i % 3 == 0).then_some(i), "key {i}");
        }
    }

    /// A table cleared and refilled reuses its chunks; its clone has each chunk's room.
    #[test]
    fn clear_keeps_chunks_and_clones_keep_room() {
        let mut table = KeyTable::default();
        (0..600).for_each(|i| _ = table.insert(key(i), i));
        let chunks = table.entries.chunks.len();
        table.clear();
        assert!(table.is_empty());
        (0..600).for_each(|i| _ = table.insert(key(i), i));
        assert_eq!(table.entries.chunks.len(), chunks);
        let copy = table.clone();
        let rooms: Vec<usize> = copy.entries.chunks.iter().map(Vec::capacity).collect();
        let expected: Vec<usize> = (0..chunks)
            .map(Chunks::<Option<(Key, usize)>>::room)
            .collect();
        assert_eq!(rooms, expected);
        assert_eq!(copy.iter().count(), 600);
        // A copy holds only the chunks in use: 10 entries fill the first two (4 + 8).
        table.clear();
        (0..10).for_each(|i| _ = table.insert(key(i), i));
        assert_eq!(table.clone().entries.chunks.len(), 2);
    }

    /// Serialized as a map: snapshots written with the hash map it replaced read into a
    /// table, and a table's bytes read as that map, with the same entries.
    #[test]
    fn serializes_as_the_hash_map_it_replaced() -> Result<(), bincode::Error> {
        type Map = hashbrown::HashMap<Key, u32, FastHash>;
        let map: Map = (0..50).map(|i| (key(i), i as u32)).collect();
        let table: KeyTable<u32> = bincode::deserialize(&bincode::serialize(&map)?)?;
        assert_eq!(table.len(), 50);
        for (k, v) in &map {
            assert_eq!(table.get_hashed(key_hash(k), k), Some(v));
        }
        let back: Map = bincode::deserialize(&bincode::serialize(&table)?)?;
        assert_eq!(back, map);
        Ok(())
    }

    /// Words of key `i`, three of them.
    fn words_of(i: usize) -> [u64; 3] {
        [i as u64, 1000 + i as u64, u64::MAX - i as u64]
    }

    /// A table's words stay with their keys: past the growing chunks, in a freed place that
    /// a new key takes, and when another table's entries move in (a rescale).
    #[test]
    fn words_stay_with_their_keys() {
        let (mut table, mut other) = (KeyTable::default(), KeyTable::default());
        for i in 0..3000 {
            let into = if i % 3 == 0 { &mut other } else { &mut table };
            into.insert_words(key(i), i, &words_of(i));
        }
        for i in (1..3000).step_by(7).filter(|i| i % 3 != 0) {
            assert_eq!(table.remove(&key(i)), Some(i));
        }
        // New keys take the freed places, which hold the removed keys' words until then.
        for i in 3000..3100 {
            table.insert_words(key(i), i, &words_of(i));
        }
        table.absorb_words(other);
        let mut seen = 0;
        for (k, &i, words) in table.iter_words() {
            assert_eq!(*k, key(i));
            assert_eq!(words, words_of(i), "{k}");
            let place = table.place(key_hash(k), k).map(|p| table.words_at(p));
            assert_eq!(place, Some(&words_of(i)[..]));
            seen += 1;
        }
        let removed = (1..3000).step_by(7).filter(|i| i % 3 != 0).count();
        assert_eq!(seen, 3100 - removed);
        assert_eq!(table.len(), seen);
    }

    /// A table emptied (by `clear`, as a dropped pane's table is kept for the next pane, or
    /// by removing its last key) starts its words again at the first place: the keys put in
    /// it after hold their own words, none of the earlier keys'.
    #[test]
    fn an_emptied_table_holds_only_the_new_keys_words() {
        let mut table = KeyTable::default();
        for i in 0..700 {
            table.insert_words(key(i), i, &words_of(i));
        }
        table.clear();
        for i in 1000..1010 {
            table.insert_words(key(i), i, &words_of(i));
        }
        let held: Vec<(usize, Vec<u64>)> = table
            .iter_words()
            .map(|(_, &i, w)| (i, w.to_vec()))
            .collect();
        let expected: Vec<(usize, Vec<u64>)> =
            (1000..1010).map(|i| (i, words_of(i).to_vec())).collect();
        assert_eq!(held, expected);
        for i in 1000..1010 {
            table.remove(&key(i));
        }
        table.insert_words(key(7), 7, &words_of(7));
        let held: Vec<(usize, Vec<u64>)> = table
            .iter_words()
            .map(|(_, &i, w)| (i, w.to_vec()))
            .collect();
        assert_eq!(held, [(7, words_of(7).to_vec())]);
    }
}
