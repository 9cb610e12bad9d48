//! Key-group sections: round trip, filtering to a new owner's range, malformed payloads.

use std::path::Path;

use proptest::prelude::*;
use weir_checkpoint::sections::{decode_sections, encode_sections};
use weir_checkpoint::KeyGroupRange;

proptest! {
    #[test]
    fn keeps_exactly_the_sections_in_range(
        sections in proptest::collection::vec((0u32..64, proptest::collection::vec(any::<u8>(), 0..20)), 0..30),
        lo in 0u32..64,
        len in 1u32..64,
    ) {
        let keep = KeyGroupRange::new(lo, lo + len)?;
        let payload = encode_sections(sections.iter().map(|(kg, b)| (*kg, b.as_slice())));
        let decoded = decode_sections(Path::new("f"), &payload, keep)?;
        let expected: Vec<(u32, &[u8])> = sections
            .iter()
            .filter(|(kg, _)| keep.contains(*kg))
            .map(|(kg, b)| (*kg, b.as_slice()))
            .collect();
        prop_assert_eq!(decoded, expected);
    }

    #[test]
    fn truncated_sections_are_refused(
        sections in proptest::collection::vec((0u32..64, proptest::collection::vec(any::<u8>(), 0..20)), 1..10),
        cut in any::<prop::sample::Index>(),
    ) {
        let payload = encode_sections(sections.iter().map(|(kg, b)| (*kg, b.as_slice())));
        let cut = cut.index(payload.len());
        let all = KeyGroupRange::new(0, 64)?;
        prop_assert!(decode_sections(Path::new("f"), &payload[..cut], all).is_err());
    }
}
