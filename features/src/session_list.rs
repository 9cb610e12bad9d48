//! A key's open sessions, in start order ([`SessionList`]). Pipeline position: inside
//! [`crate::sessions`], one list per key in the session definition's key table.
//!
//! Why not a `SmallVec<[Session; 1]>` (issue #18, run M): most keys have one open session,
//! and a small vector of one holds it inline beside a length word (8 bytes more than the
//! session). Here the three cases are an enum whose tag the compiler keeps in values the
//! session never holds (its niche: the spare values of `emitted`'s `Option` tag), so one
//! session costs its own size and nothing more; two or more live in a `Vec`, as a small
//! vector's spill does. It serializes as a sequence, as the small vector did, so snapshot
//! bytes do not change.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::ops::{Deref, DerefMut};

/// No, one or several values in order; read and changed in place as a slice.
#[derive(Clone, Debug, Default)]
pub(crate) enum SessionList<T> {
    #[default]
    Empty,
    One(T),
    /// Two or more (a list that falls to one becomes [`SessionList::One`] again).
    Many(Vec<T>),
}

impl<T> SessionList<T> {
    /// Puts `value` at `index` (at most the length), shifting the later ones.
    pub(crate) fn insert(&mut self, index: usize, value: T) {
        *self = match std::mem::take(self) {
            SessionList::Empty => {
                assert_eq!(
                    index, 0,
                    "insertion index (is {index}) should be <= len (is 0)"
                );
                SessionList::One(value)
            }
            SessionList::One(held) => {
                let mut both = Vec::with_capacity(2);
                both.push(held);
                both.insert(index, value);
                SessionList::Many(both)
            }
            SessionList::Many(mut many) => {
                many.insert(index, value);
                SessionList::Many(many)
            }
        };
    }

    /// Takes the value at `index` out, shifting the later ones.
    pub(crate) fn remove(&mut self, index: usize) -> T {
        let (list, removed) = match std::mem::take(self) {
            SessionList::One(held) if index == 0 => (SessionList::Empty, held),
            SessionList::Many(mut many) if index < many.len() => {
                let removed = many.remove(index);
                (SessionList::from(many), removed)
            }
            _ => panic!("removal index (is {index}) should be < len"),
        };
        *self = list;
        removed
    }

    /// Keeps only the values `keep` accepts, in order.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        *self = match std::mem::take(self) {
            SessionList::One(held) if !keep(&held) => SessionList::Empty,
            SessionList::Many(mut many) => {
                many.retain(keep);
                SessionList::from(many)
            }
            list => list,
        };
    }
}

impl<T> From<Vec<T>> for SessionList<T> {
    fn from(mut values: Vec<T>) -> Self {
        match values.len() {
            0 => SessionList::Empty,
            1 => values.pop().map_or(SessionList::Empty, SessionList::One),
            _ => SessionList::Many(values),
        }
    }
}

impl<T> FromIterator<T> for SessionList<T> {
    fn from_iter<I: IntoIterator<Item = T>>(values: I) -> Self {
        SessionList::from(values.into_iter().collect::<Vec<_>>())
    }
}

impl<T> Deref for SessionList<T> {
    type Target = [T];

    #[inline]
    fn deref(&self) -> &[T] {
        match self {
            SessionList::Empty => &[],
            SessionList::One(held) => std::slice::from_ref(held),
            SessionList::Many(many) => many,
        }
    }
}

impl<T> DerefMut for SessionList<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [T] {
        match self {
            SessionList::Empty => &mut [],
            SessionList::One(held) => std::slice::from_mut(held),
            SessionList::Many(many) => many,
        }
    }
}

impl<'a, T> IntoIterator for &'a SessionList<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<T: Serialize> Serialize for SessionList<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for SessionList<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Vec::deserialize(deserializer).map(SessionList::from)
    }
}

#[cfg(test)]
mod tests {
    use smallvec::SmallVec;

    use super::SessionList;

    fn items(list: &SessionList<Box<u32>>) -> Vec<u32> {
        list.iter().map(|b| **b).collect()
    }

    #[test]
    fn inserts_removes_and_retains_in_order() {
        let mut list = SessionList::default();
        list.insert(0, Box::new(20));
        assert!(matches!(list, SessionList::One(_)));
        list.insert(0, Box::new(10));
        list.insert(2, Box::new(40));
        list.insert(2, Box::new(30));
        assert_eq!(items(&list), [10, 20, 30, 40]);
        assert_eq!(*list.remove(1), 20);
        list.retain(|b| **b != 40);
        assert_eq!(items(&list), [10, 30]);
        *list[1] += 5;
        assert_eq!(*list.remove(0), 10);
        assert!(
            matches!(list, SessionList::One(_)),
            "one left: held inline again"
        );
        assert_eq!(items(&list), [35]);
        list.retain(|_| false);
        assert!(list.is_empty());
        let collected: SessionList<Box<u32>> = (1..=3).map(Box::new).collect();
        assert_eq!(items(&collected), [1, 2, 3]);
    }

    /// One value costs its own size when it has values to spare for the tag (a flag's).
    #[test]
    fn one_value_with_a_niche_costs_its_own_size() {
        type Held = (bool, [u64; 11]);
        assert_eq!(size_of::<SessionList<Held>>(), size_of::<Held>());
    }

    /// The bytes of the small vector it replaced, so snapshots do not change.
    #[test]
    fn serializes_as_the_small_vector_did() {
        for n in 0..4_u32 {
            let list: SessionList<u32> = (0..n).collect();
            let small: SmallVec<[u32; 1]> = (0..n).collect();
            let bytes = bincode::serialize(&list).expect("list");
            assert_eq!(bytes, bincode::serialize(&small).expect("small vector"));
            let back: SessionList<u32> = bincode::deserialize(&bytes).expect("back");
            assert_eq!(&back[..], &small[..]);
        }
    }
}
