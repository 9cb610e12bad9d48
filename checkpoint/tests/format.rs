//! The snapshot container: round trip and every way a file can be damaged.

use std::path::Path;

use proptest::prelude::*;
use weir_checkpoint::format::{decode, encode, HEADER_LEN};
use weir_checkpoint::CheckpointError;

proptest! {
    #[test]
    fn encode_decode_round_trip(payload in proptest::collection::vec(any::<u8>(), 0..512)) {
        let (bytes, checksum) = encode(&payload);
        let snapshot = decode(Path::new("f"), &bytes)?;
        prop_assert_eq!(snapshot.payload, payload);
        prop_assert_eq!(snapshot.payload_xxh3, checksum);
        prop_assert_eq!(snapshot.file_size, bytes.len() as u64);
    }

    #[test]
    fn any_flipped_bit_is_detected(
        payload in proptest::collection::vec(any::<u8>(), 1..256),
        at in any::<prop::sample::Index>(),
        bit in 0u8..8,
    ) {
        let (mut bytes, _) = encode(&payload);
        let at = at.index(bytes.len());
        bytes[at] ^= 1 << bit;
        prop_assert!(decode(Path::new("f"), &bytes).is_err());
    }

    #[test]
    fn any_truncation_is_detected(
        payload in proptest::collection::vec(any::<u8>(), 1..256),
        keep in any::<prop::sample::Index>(),
    ) {
        let (bytes, _) = encode(&payload);
        let keep = keep.index(bytes.len());
        prop_assert!(decode(Path::new("f"), &bytes[..keep]).is_err());
    }
}

#[test]
fn errors_name_the_problem_and_the_file() {
    let path = Path::new("ckpt/7/window/kg-0-8");
    let (bytes, _) = encode(b"state");
    let err = decode(path, b"NOTASNAPSHOTFILE.............").err();
    assert!(
        matches!(err, Some(CheckpointError::BadMagic { .. })),
        "{err:?}"
    );
    let err = decode(path, &bytes[..HEADER_LEN + 2]).err();
    assert!(
        matches!(
            err,
            Some(CheckpointError::Truncated {
                expected: 33,
                actual: 30,
                ..
            })
        ),
        "{err:?}"
    );
    let mut longer = bytes.clone();
    longer.push(0);
    let err = decode(path, &longer).err();
    assert!(
        matches!(err, Some(CheckpointError::SizeMismatch { .. })),
        "{err:?}"
    );
    let mut flipped = bytes;
    flipped[HEADER_LEN] ^= 0x80;
    let message = decode(path, &flipped).err().map(|e| e.to_string());
    assert!(
        message
            .as_deref()
            .is_some_and(|m| m.contains("ckpt/7/window/kg-0-8 is corrupt: checksum")),
        "{message:?}"
    );
}
