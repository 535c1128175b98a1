//! Text that round-trips through either backend whatever it holds.
//!
//! PostgreSQL's `TEXT` cannot hold U+0000 (NUL): binding one fails the whole statement with
//! "invalid byte sequence for encoding UTF8: 0x00". Prompts, model replies, tool output and
//! errors may hold NULs, so the PostgreSQL backend stores text through a reversible escape:
//! [`ESC`] (U+E000, the first Private Use Area code point) followed by `0` stands for a NUL,
//! and `ESC ESC` for an ESC itself. SQLite stores the bytes as they are.
//!
//! What it guarantees:
//! - **Round trip.** `decode(encode(s)) == s` for every string `s`.
//! - **Injective.** Different strings encode differently, so keys compared by equality in SQL
//!   (idempotency keys, concurrency keys, call ids) behave as before.
//! - **No NUL reaches PostgreSQL** from a value bound as [`Text`].
//! - **Free for ordinary text.** A string holding neither NUL nor ESC is bound and read as it
//!   is, without an allocation or a copy beyond the driver's own.
//! - **Old rows read as written.** Rows stored before this encoding existed hold no NUL; one
//!   holding a lone ESC (not followed by `0` or ESC) decodes to itself. (An old `ESC ESC` or
//!   `ESC 0` would read as ESC or NUL: a string of two Private Use Area characters that no
//!   one types.)
//!
//! Binds use [`Text`] (on both backends, so the shared queue code is written once); rows
//! decode text columns through [`DbText`] and [`DbOptText`] (`#[sqlx(try_from = …)]`).

use std::borrow::Cow;

use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::postgres::{PgArgumentBuffer, PgHasArrayType, PgTypeInfo, PgValueRef};
use sqlx::sqlite::{SqliteArgumentsBuffer, SqliteTypeInfo, SqliteValueRef};
use sqlx::{Decode, Encode, Postgres, Sqlite, Type};

/// The escape character of the PostgreSQL text encoding (U+E000, Private Use Area).
pub const ESC: char = '\u{E000}';
/// What follows [`ESC`] to stand for a NUL.
const NUL_MARK: char = '0';

/// Whether `s` must be rewritten to be stored in PostgreSQL.
fn needs_encoding(s: &str) -> bool {
    s.as_bytes().contains(&0) || s.contains(ESC)
}

/// `s` as PostgreSQL stores it: NUL → ESC `0`, ESC → ESC ESC; borrowed when unchanged.
pub fn encode(s: &str) -> Cow<'_, str> {
    if !needs_encoding(s) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\0' => {
                out.push(ESC);
                out.push(NUL_MARK);
            }
            ESC => {
                out.push(ESC);
                out.push(ESC);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// The text `stored` stands for (the inverse of [`encode`]); `stored` itself when it holds
/// no ESC.
pub fn decode(stored: String) -> String {
    if !stored.contains(ESC) {
        return stored;
    }
    let mut out = String::with_capacity(stored.len());
    let mut chars = stored.chars();
    while let Some(c) = chars.next() {
        if c != ESC {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some(NUL_MARK) => out.push('\0'),
            Some(ESC) => out.push(ESC),
            // Never written by `encode`: a lone ESC of a row older than the encoding.
            Some(other) => {
                out.push(ESC);
                out.push(other);
            }
            None => out.push(ESC),
        }
    }
    out
}

/// A text parameter: bound as it is on SQLite, encoded on PostgreSQL (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Text<'a>(pub &'a str);

impl<'a> Text<'a> {
    /// An optional text parameter.
    pub fn opt(s: Option<&'a str>) -> Option<Text<'a>> {
        s.map(Text)
    }
}

impl Type<Sqlite> for Text<'_> {
    fn type_info() -> SqliteTypeInfo {
        <str as Type<Sqlite>>::type_info()
    }

    fn compatible(ty: &SqliteTypeInfo) -> bool {
        <str as Type<Sqlite>>::compatible(ty)
    }
}

impl Encode<'_, Sqlite> for Text<'_> {
    fn encode_by_ref(&self, buf: &mut SqliteArgumentsBuffer) -> Result<IsNull, BoxDynError> {
        <&str as Encode<Sqlite>>::encode(self.0, buf)
    }
}

impl Type<Postgres> for Text<'_> {
    fn type_info() -> PgTypeInfo {
        <str as Type<Postgres>>::type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        <str as Type<Postgres>>::compatible(ty)
    }
}

impl PgHasArrayType for Text<'_> {
    fn array_type_info() -> PgTypeInfo {
        <&str as PgHasArrayType>::array_type_info()
    }

    fn array_compatible(ty: &PgTypeInfo) -> bool {
        <&str as PgHasArrayType>::array_compatible(ty)
    }
}

impl Encode<'_, Postgres> for Text<'_> {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        // Ordinary text goes straight into the buffer; only text with NUL or ESC is copied.
        buf.extend(encode(self.0).as_bytes());
        Ok(IsNull::No)
    }

    fn size_hint(&self) -> usize {
        self.0.len()
    }
}

/// A text column as stored: as it is on SQLite, decoded on PostgreSQL. Read a `String`
/// field through it with `#[sqlx(try_from = "DbText")]`, or a column with `query_scalar`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DbText(pub String);

impl From<DbText> for String {
    fn from(t: DbText) -> String {
        t.0
    }
}

impl Type<Sqlite> for DbText {
    fn type_info() -> SqliteTypeInfo {
        <String as Type<Sqlite>>::type_info()
    }

    fn compatible(ty: &SqliteTypeInfo) -> bool {
        <String as Type<Sqlite>>::compatible(ty)
    }
}

impl<'r> Decode<'r, Sqlite> for DbText {
    fn decode(value: SqliteValueRef<'r>) -> Result<Self, BoxDynError> {
        <String as Decode<Sqlite>>::decode(value).map(DbText)
    }
}

impl Type<Postgres> for DbText {
    fn type_info() -> PgTypeInfo {
        <String as Type<Postgres>>::type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        <String as Type<Postgres>>::compatible(ty)
    }
}

impl<'r> Decode<'r, Postgres> for DbText {
    fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
        <String as Decode<Postgres>>::decode(value).map(|s| DbText(decode(s)))
    }
}

/// A nullable text column as stored; see [`DbText`]. For `Option<String>` fields:
/// `#[sqlx(try_from = "DbOptText")]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DbOptText(pub Option<String>);

impl From<DbOptText> for Option<String> {
    fn from(t: DbOptText) -> Option<String> {
        t.0
    }
}

impl Type<Sqlite> for DbOptText {
    fn type_info() -> SqliteTypeInfo {
        <String as Type<Sqlite>>::type_info()
    }

    fn compatible(ty: &SqliteTypeInfo) -> bool {
        <String as Type<Sqlite>>::compatible(ty)
    }
}

impl<'r> Decode<'r, Sqlite> for DbOptText {
    fn decode(value: SqliteValueRef<'r>) -> Result<Self, BoxDynError> {
        <Option<String> as Decode<Sqlite>>::decode(value).map(DbOptText)
    }
}

impl Type<Postgres> for DbOptText {
    fn type_info() -> PgTypeInfo {
        <String as Type<Postgres>>::type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        <String as Type<Postgres>>::compatible(ty)
    }
}

impl<'r> Decode<'r, Postgres> for DbOptText {
    fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
        <Option<String> as Decode<Postgres>>::decode(value).map(|s| DbOptText(s.map(decode)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(s: &str) {
        let stored = encode(s);
        assert!(
            !stored.contains('\0'),
            "no NUL is stored: {s:?} -> {stored:?}"
        );
        assert_eq!(decode(stored.clone().into_owned()), s, "via {stored:?}");
    }

    #[test]
    fn ordinary_text_is_left_alone() {
        for s in [
            "",
            "hello",
            "naïve 日本語 🎉",
            "\u{E001}\u{F8FF}",
            "0\\0 ESC",
        ] {
            assert!(matches!(encode(s), Cow::Borrowed(_)), "{s:?}");
            assert_eq!(decode(s.to_string()), s);
        }
    }

    #[test]
    fn nul_and_escape_round_trip_with_their_neighbours() {
        let esc = ESC.to_string();
        let cases = [
            "\0".to_string(),
            "\0\0".to_string(),
            "a\0b".to_string(),
            esc.clone(),
            format!("{esc}{esc}"),
            format!("{esc}0"),
            format!("\0{esc}"),
            format!("{esc}\0"),
            format!("{esc}\u{0}0"),
            format!("0{esc}0\0 0"),
            format!("x{esc}"),
            format!("{esc}{esc}0{esc}\0"),
        ];
        for s in &cases {
            round_trip(s);
        }
        assert_eq!(encode("a\0b"), format!("a{esc}0b"));
        assert_eq!(encode(&esc), format!("{esc}{esc}"));
    }

    #[test]
    fn encoding_is_injective_on_confusable_pairs() {
        let esc = ESC.to_string();
        let pairs = [
            ("\0".to_string(), format!("{esc}0")),
            (esc.clone(), format!("{esc}{esc}")),
            (format!("{esc}0"), format!("{esc}{esc}0")),
        ];
        for (a, b) in &pairs {
            assert_ne!(encode(a), encode(b), "{a:?} and {b:?}");
        }
    }

    #[test]
    fn a_lone_escape_of_an_old_row_reads_as_written() {
        let esc = ESC.to_string();
        assert_eq!(decode(format!("a{esc}b")), format!("a{esc}b"));
        assert_eq!(decode(format!("a{esc}")), format!("a{esc}"));
    }

    /// Property style: many generated strings over an alphabet dense in NUL, ESC, `0` and
    /// their neighbours round-trip, and distinct strings encode distinctly.
    #[test]
    fn generated_strings_round_trip_and_stay_distinct() {
        let alphabet = [
            '\0', ESC, '0', 'a', '\u{1}', '\u{D7FF}', '\u{E001}', 'é', '🎉',
        ];
        let mut seen = std::collections::HashMap::new();
        // A fixed-seed xorshift: reproducible without a dependency.
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..20_000 {
            let len = (next() % 12) as usize;
            let s: String = (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect();
            round_trip(&s);
            let stored = encode(&s).into_owned();
            if let Some(other) = seen.insert(stored.clone(), s.clone()) {
                assert_eq!(other, s, "two strings encode to {stored:?}");
            }
        }
    }

    #[test]
    fn postgres_bind_writes_the_encoding() {
        let mut buf = PgArgumentBuffer::default();
        let _ =
            <Text<'_> as Encode<Postgres>>::encode_by_ref(&Text("a\0\u{E000}b"), &mut buf).unwrap();
        assert_eq!(&buf[..], "a\u{E000}0\u{E000}\u{E000}b".as_bytes());
    }
}
