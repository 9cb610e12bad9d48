//! Where the JSON writers of [`crate::encode`] and [`crate::score_json`] put their text: a
//! vector, or a [`Cursor`] over a vector's spare room that the feature-row writer fills a
//! row at a time.
//!
//! Each append to a `Vec<u8>` reads and writes the vector's length in memory: the bytes
//! written through its buffer might be the vector's own fields as far as the compiler knows,
//! so the length cannot stay in a register, and a row's ~25 appends are a chain of stores
//! and loads of it. A cursor keeps its position in a register and sets the vector's length
//! once, when it is dropped (BENCHMARKS.md, F, fix 82).

/// The longest text [`TextOut::put_short`] copies itself.
pub(crate) const SHORT: usize = 32;

/// A sink for text.
pub(crate) trait TextOut {
    /// Appends `bytes`.
    fn put(&mut self, bytes: &[u8]);

    /// Appends `bytes`, which are most often a few bytes long (a formatted number, a key): a
    /// copy of a length known only at run time is a `memcpy` call, which cost about as much as
    /// formatting the number. Up to [`SHORT`] bytes are copied as two fixed-size copies (of
    /// 1, 4, 8 or 16 bytes) that overlap in the middle, with no call.
    fn put_short(&mut self, bytes: &[u8]);

    /// Appends what `write` appends to a vector (serde_json's string escapes).
    fn put_with(&mut self, write: impl FnOnce(&mut Vec<u8>));

    /// Appends one byte.
    #[inline(always)]
    fn push(&mut self, byte: u8) {
        self.put(&[byte]);
    }
}

impl TextOut for Vec<u8> {
    #[inline(always)]
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }

    #[inline(always)]
    fn put_short(&mut self, bytes: &[u8]) {
        let n = bytes.len();
        if n > SHORT {
            self.extend_from_slice(bytes);
            return;
        }
        self.reserve(n);
        let len = self.len();
        // SAFETY: `reserve` made room for `n` bytes after the length, which `copy_short`
        // writes; the length then counts exactly those.
        #[allow(unsafe_code)]
        unsafe {
            copy_short(bytes, self.spare_capacity_mut().as_mut_ptr().cast::<u8>());
            self.set_len(len + n);
        }
    }

    #[inline(always)]
    fn put_with(&mut self, write: impl FnOnce(&mut Vec<u8>)) {
        write(self);
    }
}

/// Copies `bytes` (at most [`SHORT`]) to `to` as two fixed-size copies that overlap.
///
/// SAFETY (callers): `to` is valid for writes of `bytes.len()` bytes and does not overlap
/// `bytes`.
#[inline(always)]
#[allow(unsafe_code)]
unsafe fn copy_short(bytes: &[u8], to: *mut u8) {
    /// Copies `W` bytes from `from[at..]` to `to[at..]`.
    ///
    /// SAFETY (callers): `at + W` is within both ranges.
    #[inline(always)]
    unsafe fn copy<const W: usize>(from: *const u8, to: *mut u8, at: usize) {
        // SAFETY: in bounds by the caller's contract; the ranges do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(from.add(at), to.add(at), W) }
    }
    let (n, from) = (bytes.len(), bytes.as_ptr());
    debug_assert!(n <= SHORT);
    // SAFETY: each pair of copies is in bounds (its width is at most `n`) and together they
    // cover all `n` bytes.
    unsafe {
        match n {
            0 => {}
            1..=3 => {
                copy::<1>(from, to, 0);
                copy::<1>(from, to, n / 2);
                copy::<1>(from, to, n - 1);
            }
            4..=7 => {
                copy::<4>(from, to, 0);
                copy::<4>(from, to, n - 4);
            }
            8..=15 => {
                copy::<8>(from, to, 0);
                copy::<8>(from, to, n - 8);
            }
            _ => {
                copy::<16>(from, to, 0);
                copy::<16>(from, to, n - 16);
            }
        }
    }
}

/// Appends to a vector through its spare room: room for a whole row is reserved up front,
/// and a write past it reserves more. The vector's length counts what was written once the
/// cursor is dropped.
pub(crate) struct Cursor<'a> {
    out: &'a mut Vec<u8>,
    /// The first byte of the room: `out`'s spare capacity when the room was last reserved.
    start: *mut u8,
    /// Bytes written from `start` on.
    at: usize,
    /// Bytes of room from `start` on.
    room: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the end of `out`, with room for `room` bytes.
    #[inline(always)]
    pub(crate) fn new(out: &'a mut Vec<u8>, room: usize) -> Self {
        // Out of line, as for a write past the room: a `reserve` inlined here measured
        // ×0.99–1.01 (BENCHMARKS.md, F, fix 82).
        let (start, room) = reserve(out, 0, room);
        Cursor {
            out,
            start,
            at: 0,
            room,
        }
    }

    /// Makes room for `n` more bytes.
    #[inline(always)]
    fn room_for(&mut self, n: usize) {
        if n > self.room - self.at {
            // The cursor's fields are passed by value, not by reference, so that it never
            // leaves its caller's registers.
            (self.start, self.room) = reserve(self.out, self.at, n);
            self.at = 0;
        }
    }

    /// Counts the bytes written in `out`'s length and starts the room after them.
    #[inline(always)]
    fn commit(&mut self) {
        // SAFETY: the `at` bytes from `start`, the start of `out`'s spare capacity, were
        // written (`put`, `put_short`); the length then counts exactly those.
        #[allow(unsafe_code)]
        unsafe {
            self.out.set_len(self.out.len() + self.at);
            self.start = self.start.add(self.at);
        }
        self.room -= self.at;
        self.at = 0;
    }
}

/// Counts the `written` bytes of `out`'s spare room in its length, reserves room for `n`
/// more and returns where the room starts and its length.
#[cold]
#[inline(never)]
fn reserve(out: &mut Vec<u8>, written: usize, n: usize) -> (*mut u8, usize) {
    // SAFETY: the caller wrote `written` bytes at the start of the spare capacity.
    #[allow(unsafe_code)]
    unsafe {
        out.set_len(out.len() + written);
    }
    out.reserve(n);
    let spare = out.spare_capacity_mut();
    (spare.as_mut_ptr().cast::<u8>(), spare.len())
}

impl TextOut for Cursor<'_> {
    #[inline(always)]
    fn put(&mut self, bytes: &[u8]) {
        let n = bytes.len();
        self.room_for(n);
        // SAFETY: `room_for` made room for `n` bytes at `at`, in `out`'s spare capacity,
        // which no borrowed slice overlaps.
        #[allow(unsafe_code)]
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.start.add(self.at), n);
        }
        self.at += n;
    }

    #[inline(always)]
    fn put_short(&mut self, bytes: &[u8]) {
        let n = bytes.len();
        if n > SHORT {
            self.put(bytes);
            return;
        }
        self.room_for(n);
        // SAFETY: as for `put`.
        #[allow(unsafe_code)]
        unsafe {
            copy_short(bytes, self.start.add(self.at));
        }
        self.at += n;
    }

    fn put_with(&mut self, write: impl FnOnce(&mut Vec<u8>)) {
        self.commit();
        write(self.out);
        let (start, room) = reserve(self.out, 0, 0);
        (self.start, self.room) = (start, room);
    }
}

impl Drop for Cursor<'_> {
    fn drop(&mut self) {
        self.commit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_appends_equal_extend_from_slice_at_every_length_and_room() {
        let text: Vec<u8> = (0..=40u8).map(|i| b'a' + i % 26).collect();
        for n in 0..=text.len() {
            for (before, room) in [(0, 0), (3, 3), (5, 64), (17, 17)] {
                let mut expected = Vec::with_capacity(room);
                expected.extend(std::iter::repeat_n(b'x', before));
                let mut got = expected.clone();
                let mut through_cursor = expected.clone();
                expected.extend_from_slice(&text[..n]);
                got.put_short(&text[..n]);
                assert_eq!(got, expected, "{n} bytes after {before}");
                Cursor::new(&mut through_cursor, room.saturating_sub(before)).put_short(&text[..n]);
                assert_eq!(through_cursor, expected, "{n} bytes after {before}, cursor");
            }
        }
    }

    #[test]
    fn a_cursor_writes_past_its_first_room_and_around_a_vector_writer() {
        let mut out = b"head".to_vec();
        {
            let mut text = Cursor::new(&mut out, 2);
            text.put(b"-ab");
            text.put_short(b"cdefghijklmnopqrstu");
            text.put_with(|v| v.extend_from_slice(b"[vec]"));
            text.push(b'!');
            text.put(&[b'z'; 100]);
        }
        let want = [&b"head-abcdefghijklmnopqrstu[vec]!"[..], &[b'z'; 100]].concat();
        assert_eq!(out, want);
    }
}
