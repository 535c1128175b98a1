//! The redactor's guarantees, checked on random secrets at random offsets, and the
//! resolver's.

use super::*;

#[test]
fn token_shapes_are_redacted_beside_known_values() {
    let r = Redactor::new([("KEY", "s3cret-value")]).with_shapes(&GITHUB_TOKEN_SHAPES);
    let text = "key s3cret-value, token ghs_16C7e42F292c6912E7710c838347Ae178B4a, \
                pat github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz, \
                short ghs_abc, word ghost_town";
    assert_eq!(
        r.redact(text),
        "key [REDACTED:KEY], token [REDACTED:GITHUB_TOKEN], pat [REDACTED:GITHUB_TOKEN], \
         short ghs_abc, word ghost_town"
    );
    assert!(r.longest_match() >= 255);
}

#[test]
fn substitutes_and_redacts_longest_first() {
    let s = SecretResolver::from_map([("TOKEN", "abc123"), ("LONG", "xxabc123yy"), ("EMPTY", "")]);
    assert_eq!(
        s.substitute("Bearer {{secret:TOKEN}}").unwrap(),
        "Bearer abc123"
    );
    assert_eq!(s.substitute("{{ secret:LONG }}!").unwrap(), "xxabc123yy!");
    assert_eq!(
        s.redact("a xxabc123yy b abc123 c"),
        "a [REDACTED:LONG] b [REDACTED:TOKEN] c"
    );
    assert_eq!(s.redact("nothing here"), "nothing here");
    let err = s.substitute("{{secret:NOPE}}").unwrap_err().to_string();
    assert!(err.contains("NOPE") && err.contains("TOKEN"), "{err}");
    assert!(!format!("{s:?}").contains("abc123"));
}

/// splitmix64: a fixed, seeded sequence, so a failure is reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn text(&mut self, alphabet: &[char], len: usize) -> String {
        (0..len)
            .map(|_| alphabet[self.below(alphabet.len())])
            .collect()
    }
}

/// Secrets draw from letters, digits and the characters encoders treat specially.
const SECRET_CHARS: &[char] = &[
    'a', 'b', 'k', 'Q', 'Z', '0', '7', '9', '-', '_', '+', '/', '=', ' ', '"', '\\', '\n', '%',
    '&', 'é', '€',
];
// Disjoint from the secrets' characters, so no piece of a secret's form arises by chance.
const FILLER_CHARS: &[char] = &['x', 'y', '.'];

fn windows(text: &str, n: usize) -> impl Iterator<Item = &str> {
    let bytes = text.as_bytes();
    (0..=bytes.len().saturating_sub(n))
        .filter(move |&i| bytes.len() >= n && text.is_char_boundary(i))
        .filter_map(move |i| text.get(i..i + n))
}

/// The guarantee, for random secrets (8–48 characters) at random offsets inside random
/// text: take E(prefix + secret + suffix) for each covered encoding E, redact it, and no
/// 8-character substring of the secret's *core* in that encoding is left — the core
/// being E(secret) for hex, URL, form, JSON and reversed, and for base64/base64url the
/// encoding of the whole 3-byte groups inside the secret at that offset (the 1–3
/// characters beside it also depend on the neighbouring bytes and may stay). Also: the
/// secret itself leaves no 8-character substring, and redacting the text as a stream in
/// random pieces gives the same result.
#[test]
fn no_8_char_piece_of_any_encoding_survives_at_any_offset() {
    use base64::Engine as _;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE, URL_SAFE_NO_PAD};
    let mut rng = Rng(14);
    for round in 0..300 {
        let len = 8 + rng.below(41);
        let secret = rng.text(SECRET_CHARS, len);
        let r = Redactor::new([("S", secret.clone())]);
        let (before, after) = (rng.below(8), rng.below(8));
        let prefix = rng.text(FILLER_CHARS, before);
        let suffix = rng.text(FILLER_CHARS, after);
        let whole = format!("{prefix}{secret}{suffix}");
        let skip = (3 - prefix.len() % 3) % 3;
        let sb = secret.as_bytes();
        let core = &sb[skip..skip + (sb.len() - skip) / 3 * 3];
        let mut wrapped = STANDARD.encode(whole.as_bytes()).into_bytes();
        let wrapped: String = wrapped
            .chunks_mut(76)
            .map(|l| format!("{}\n", String::from_utf8_lossy(l)))
            .collect();
        let cases: Vec<(&str, String, String)> = vec![
            ("plain", whole.clone(), secret.clone()),
            (
                "base64",
                STANDARD.encode(&whole),
                STANDARD.encode(core).replace('=', ""),
            ),
            (
                "base64 wrapped",
                wrapped,
                STANDARD.encode(core).replace('=', ""),
            ),
            (
                "base64url",
                URL_SAFE.encode(&whole),
                URL_SAFE_NO_PAD.encode(core),
            ),
            (
                "base64url bare",
                URL_SAFE_NO_PAD.encode(&whole),
                URL_SAFE_NO_PAD.encode(core),
            ),
            ("hex", hex::encode(&whole), hex::encode(&secret)),
            ("HEX", hex::encode_upper(&whole), hex::encode_upper(&secret)),
            (
                "url",
                encodings::percent_encode(&whole, false),
                encodings::percent_encode(&secret, false),
            ),
            (
                "form",
                encodings::percent_encode(&whole, true),
                encodings::percent_encode(&secret, true),
            ),
            (
                "json",
                encodings::json_escape(&whole),
                encodings::json_escape(&secret),
            ),
            (
                "reversed",
                whole.chars().rev().collect(),
                secret.chars().rev().collect(),
            ),
        ];
        for (label, text, secret_form) in cases {
            let out = r.redact(&text);
            let normalised = if label == "base64 wrapped" {
                out.replace('\n', "")
            } else {
                out.clone()
            };
            for piece in windows(&secret_form, 8) {
                assert!(
                    !normalised.contains(piece),
                    "round {round}, {label}: {piece:?} of {secret:?} survives in {out:?}"
                );
            }
            assert!(
                out.contains("[REDACTED:S]"),
                "round {round}, {label}: {out:?}"
            );
            // The same text as a stream, cut in random pieces.
            let bytes = text.as_bytes();
            let (mut pending, mut streamed) = (Vec::new(), Vec::new());
            let mut at = 0;
            while at < bytes.len() {
                let take = (1 + rng.below(40)).min(bytes.len() - at);
                pending.extend_from_slice(&bytes[at..at + take]);
                at += take;
                let (done, used) = r.redact_stream_prefix(&pending, at == bytes.len());
                streamed.extend(done);
                pending.drain(..used);
            }
            assert!(pending.is_empty());
            assert_eq!(
                String::from_utf8_lossy(&streamed),
                out,
                "round {round}, {label}: streamed"
            );
        }
    }
}

#[test]
fn short_secrets_are_redacted_exactly_and_innocent_text_is_kept() {
    let r = Redactor::new([("PIN", "4711")]);
    assert_eq!(r.redact("pin 4711!"), "pin [REDACTED:PIN]!");
    // Its hex (34373131) and base64 (NDcxMQ) are too short to redact without false hits.
    assert_eq!(r.redact("34373131 NDcxMQ"), "34373131 NDcxMQ");
    let r = Redactor::new([("K", "sk-live-0123456789")]);
    let innocent = "the quick brown fox 0123 sk-live 2f2f";
    assert_eq!(r.redact(innocent), innocent);
    assert_eq!(
        r.longest_match(),
        16 * 6,
        "16 hex digits, each from a 6-byte escape"
    );
}

#[test]
fn redact_only_values_are_redacted_but_never_substituted() {
    let s = SecretResolver::from_map([("GITHUB_TOKEN", "ghp_abcdefgh12345")])
        .with_redact_only([("NIGHTSHIFT_API_TOKEN", "tok-0123456789abcdef")]);
    assert_eq!(s.names(), vec!["GITHUB_TOKEN".to_string()]);
    let err = s
        .substitute("{{secret:NIGHTSHIFT_API_TOKEN}}")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("unknown secret `NIGHTSHIFT_API_TOKEN`"),
        "{err}"
    );
    assert!(!err.contains("tok-0123"), "{err}");
    assert_eq!(
        s.redact("a tok-0123456789abcdef b ghp_abcdefgh12345"),
        "a [REDACTED:NIGHTSHIFT_API_TOKEN] b [REDACTED:GITHUB_TOKEN]"
    );
    let mut v = serde_json::json!({"x": ["tok-0123456789abcdef"], "tok-0123456789abcdef": 1});
    s.redactor().redact_json(&mut v);
    assert_eq!(
        v,
        serde_json::json!({"x": ["[REDACTED:NIGHTSHIFT_API_TOKEN]"],
                           "[REDACTED:NIGHTSHIFT_API_TOKEN]": 1})
    );
    let debug = format!("{s:?}");
    assert!(
        debug.contains("NIGHTSHIFT_API_TOKEN") && !debug.contains("tok-0"),
        "{debug}"
    );
}

#[test]
fn a_stream_redacts_values_split_across_pieces_and_lines() {
    let s = SecretResolver::from_map([("KEY", "line1\nline2"), ("TOKEN", "abc123")]);
    let stream = b"x line1\nline2 y abc123 z abc".to_vec();
    // Every way of cutting the stream in two gives the one-piece redaction.
    let whole = s.redact_bytes(&stream);
    for split in 0..=stream.len() {
        let mut pending = Vec::new();
        let mut out = Vec::new();
        for (piece, last) in [(&stream[..split], false), (&stream[split..], true)] {
            pending.extend_from_slice(piece);
            let (done, used) = s.redact_stream_prefix(&pending, last);
            out.extend(done);
            pending.drain(..used);
        }
        assert!(pending.is_empty());
        assert_eq!(out, whole, "split at {split}");
    }
    assert_eq!(
        String::from_utf8(whole).unwrap(),
        "x [REDACTED:KEY] y [REDACTED:TOKEN] z abc"
    );
    let none = SecretResolver::default();
    assert_eq!(
        none.redact_stream_prefix(b"abc", false),
        (b"abc".to_vec(), 3)
    );
}

/// Whether any `n`-byte run of `secret` is in `text`.
fn has_run(text: &str, secret: &str, n: usize) -> bool {
    windows(secret, n).any(|run| text.contains(run))
}

const KEY: &str = "sk-live-0123456789abcdefXYZ";

#[test]
fn a_prefix_suffix_or_middle_run_of_8_is_redacted_and_a_run_of_7_passes() {
    let r = Redactor::new([("KEY", KEY)]);
    for (label, part) in [
        ("prefix", &KEY[..18]),
        ("suffix", &KEY[KEY.len() - 8..]),
        ("middle", &KEY[5..21]),
        ("exactly 8", &KEY[9..17]),
    ] {
        let out = r.redact(&format!("a {part} b"));
        assert_eq!(out, "a [REDACTED:KEY] b", "{label}");
    }
    for part in [&KEY[..7], &KEY[10..17], &KEY[KEY.len() - 7..]] {
        let text = format!("a {part} b");
        assert_eq!(r.redact(&text), text, "7 bytes are not a run to redact");
    }
}

#[test]
fn secrets_side_by_side_are_each_marked() {
    let r = Redactor::new([("A", "aaaa-1111-aaaa"), ("B", "bbbb-2222-bbbb")]);
    assert_eq!(
        r.redact("x aaaa-1111-aaaabbbb-2222-bbbb y 2222-bbbb"),
        "x [REDACTED:A][REDACTED:B] y [REDACTED:B]"
    );
}

#[test]
fn runs_in_every_covered_encoding_are_redacted() {
    use base64::Engine as _;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
    let r = Redactor::new([("KEY", KEY)]);
    let prefix = &KEY[..18];
    let middle = &KEY[4..20];
    let cases = [
        ("hex of a prefix", hex::encode(prefix), hex::encode(prefix)),
        (
            "HEX of a middle",
            hex::encode_upper(middle),
            hex::encode_upper(middle),
        ),
        (
            "base64 of a prefix",
            STANDARD.encode(prefix),
            STANDARD.encode(&prefix[..15]),
        ),
        (
            "base64url of a middle",
            URL_SAFE_NO_PAD.encode(middle),
            URL_SAFE_NO_PAD.encode(&middle[..15]),
        ),
        (
            "reversed middle",
            middle.chars().rev().collect(),
            middle.chars().rev().collect(),
        ),
        (
            "json-escaped prefix",
            prefix
                .chars()
                .map(|c| format!("\\u{:04x}", c as u32))
                .collect(),
            prefix.to_string(),
        ),
        (
            "url-encoded middle",
            middle.bytes().map(|b| format!("%{b:02X}")).collect(),
            middle.to_string(),
        ),
    ];
    for (label, text, form) in cases {
        let out = r.redact(&format!("<{text}>"));
        assert!(out.contains("[REDACTED:KEY]"), "{label}: {out}");
        assert!(!has_run(&out, &form, 8), "{label}: {out}");
    }
    // xxd's ASCII column shows 16 characters of the value in a row.
    let xxd = "00000000: 736b 2d6c 6976 652d 3031 3233 3435 3637  sk-live-01234567\n";
    let out = r.redact(xxd);
    assert!(!has_run(&out, KEY, 8), "{out}");
}

#[test]
fn a_stream_cut_anywhere_lets_no_run_of_a_prefix_through() {
    let r = Redactor::new([("KEY", KEY)]);
    let text = format!("head {} tail", &KEY[..12]);
    for split in 0..=text.len() {
        let mut stream = StreamRedactor::new(r.clone());
        let mut out = stream.push(&text.as_bytes()[..split]);
        out.extend(stream.flush());
        out.extend(stream.push(&text.as_bytes()[split..]));
        out.extend(stream.flush());
        let out = String::from_utf8(out).unwrap();
        assert!(!has_run(&out, KEY, 8), "split {split}: {out}");
    }
}
