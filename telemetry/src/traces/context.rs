//! Which trace a run belongs to, decided from what is stored, so every job of the run — on
//! any daemon, after any crash — joins the same trace under the same run span.
//!
//! - A run started with a W3C `traceparent` (a webhook delivery or an API request that
//!   carried one) continues that trace: its run span is a child of the sender's span.
//! - Any other run gets a trace of its own whose id is the run's id (a UUID is 128 bits, as
//!   a trace id is), so an operator finds a run's trace from its id and back.
//! - The run span's id is the low 64 bits of the run's id: the same on every daemon, so job
//!   spans written days apart are children of one run span.
//!
//! Pure functions only: parsing and formatting the header, deriving the ids.

use opentelemetry::trace::{SpanId, TraceFlags, TraceId};

/// A parsed W3C Trace Context `traceparent` header
/// (`00-<32 hex trace id>-<16 hex parent span id>-<2 hex flags>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    pub trace_id: TraceId,
    pub parent_id: SpanId,
    pub sampled: bool,
}

impl TraceParent {
    /// The header's value parsed as the W3C Trace Context spec says a receiver must: version
    /// `00` exactly 55 characters; a later version may append `-…` fields, which are ignored;
    /// version `ff`, upper-case hex, an all-zero trace id or parent id are invalid. `None` for
    /// an invalid header (the spec says to start a new trace then, not to fail the request).
    pub fn parse(header: &str) -> Option<TraceParent> {
        let header = header.trim();
        let mut parts = header.split('-');
        let version = parts.next()?;
        let trace = parts.next()?;
        let parent = parts.next()?;
        let flags = parts.next()?;
        let rest = parts.next();
        if !is_lower_hex(version, 2) || version == "ff" {
            return None;
        }
        if version == "00" && (rest.is_some() || header.len() != 55) {
            return None;
        }
        if !is_lower_hex(trace, 32) || !is_lower_hex(parent, 16) || !is_lower_hex(flags, 2) {
            return None;
        }
        let trace_id = TraceId::from_hex(trace).ok()?;
        let parent_id = SpanId::from_hex(parent).ok()?;
        if trace_id == TraceId::INVALID || parent_id == SpanId::INVALID {
            return None;
        }
        let flags = u8::from_str_radix(flags, 16).ok()?;
        Some(TraceParent {
            trace_id,
            parent_id,
            sampled: flags & 1 == 1,
        })
    }

    /// The header's value, version `00`.
    pub fn header(&self) -> String {
        format!(
            "00-{}-{}-{:02x}",
            self.trace_id,
            self.parent_id,
            u8::from(self.sampled)
        )
    }

    /// The header normalised (trimmed, version `00`), for storing; `None` when invalid.
    pub fn normalise(header: &str) -> Option<String> {
        TraceParent::parse(header).map(|t| t.header())
    }
}

fn is_lower_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A run's place in a trace: the trace, the run span's id, and the span it continues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunTrace {
    pub trace_id: TraceId,
    /// The run span: every job span of the run is its child.
    pub span_id: SpanId,
    /// The sender's span the run continues (from its stored `traceparent`), if any.
    pub parent: Option<SpanId>,
    /// Whether the trace is recorded (the sender's sampled flag; a trace of our own: yes).
    pub sampled: bool,
}

impl RunTrace {
    /// The trace of run `run_id`, started with the stored `traceparent` when it has one (an
    /// invalid stored value is taken as none).
    pub fn of(run_id: &str, traceparent: Option<&str>) -> RunTrace {
        let bits = run_bits(run_id);
        let span_id = SpanId::from_bytes(non_zero(bits as u64).to_be_bytes());
        match traceparent.and_then(TraceParent::parse) {
            Some(tp) => RunTrace {
                trace_id: tp.trace_id,
                span_id,
                parent: Some(tp.parent_id),
                sampled: tp.sampled,
            },
            None => RunTrace {
                trace_id: TraceId::from_bytes(non_zero_128(bits).to_be_bytes()),
                span_id,
                parent: None,
                sampled: true,
            },
        }
    }

    /// The `traceparent` that names the run span: what the run's notices carry onward, so a
    /// receiver's spans join the run's trace.
    pub fn traceparent(&self) -> String {
        TraceParent {
            trace_id: self.trace_id,
            parent_id: self.span_id,
            sampled: self.sampled,
        }
        .header()
    }

    /// The trace flags of the run's spans.
    pub fn flags(&self) -> TraceFlags {
        if self.sampled {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::default()
        }
    }
}

/// The run id's 128 bits: the UUID itself, or (for an id that is not a UUID, which the store
/// never makes but a test might) a 128-bit FNV-1a hash of it.
fn run_bits(run_id: &str) -> u128 {
    match uuid::Uuid::parse_str(run_id) {
        Ok(u) => u.as_u128(),
        Err(_) => {
            const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
            const PRIME: u128 = 0x0000000001000000000000000000013B;
            run_id
                .bytes()
                .fold(OFFSET, |h, b| (h ^ u128::from(b)).wrapping_mul(PRIME))
        }
    }
}

fn non_zero(v: u64) -> u64 {
    if v == 0 { 1 } else { v }
}

fn non_zero_128(v: u128) -> u128 {
    if v == 0 { 1 } else { v }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_parses_and_formats_back() {
        let tp = TraceParent::parse(VALID).unwrap();
        assert_eq!(
            tp.trace_id,
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap()
        );
        assert_eq!(tp.parent_id, SpanId::from_hex("00f067aa0ba902b7").unwrap());
        assert!(tp.sampled);
        assert_eq!(tp.header(), VALID);
        let unsampled = VALID.replace("-01", "-00");
        assert!(!TraceParent::parse(&unsampled).unwrap().sampled);
        assert_eq!(
            TraceParent::normalise(&format!("  {VALID} ")).as_deref(),
            Some(VALID)
        );
    }

    #[test]
    fn a_later_version_may_append_fields_but_00_may_not() {
        let later = VALID.replacen("00-", "01-", 1) + "-what-comes-next";
        let tp = TraceParent::parse(&later).unwrap();
        assert_eq!(tp.header(), VALID);
        assert_eq!(TraceParent::parse(&format!("{VALID}-extra")), None);
    }

    #[test]
    fn invalid_traceparents_are_none() {
        for bad in [
            "",
            "garbage",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902bz-01",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_run_of_its_own_is_traced_under_its_id() {
        let run_id = "0192f1d2-7a3b-7c4d-8e5f-a0b1c2d3e4f5";
        let t = RunTrace::of(run_id, None);
        assert_eq!(t.trace_id.to_string(), run_id.replace('-', ""));
        assert_eq!(t.span_id.to_string(), "8e5fa0b1c2d3e4f5");
        assert_eq!(t.parent, None);
        assert!(t.sampled);
        assert_eq!(t, RunTrace::of(run_id, None), "the same on every daemon");
        assert_eq!(
            t.traceparent(),
            "00-0192f1d27a3b7c4d8e5fa0b1c2d3e4f5-8e5fa0b1c2d3e4f5-01"
        );
        let other = RunTrace::of("0192f1d2-7a3b-7c4d-8e5f-a0b1c2d3e4f6", None);
        assert_ne!(other.trace_id, t.trace_id);
    }

    #[test]
    fn a_run_with_a_traceparent_continues_that_trace() {
        let run_id = "0192f1d2-7a3b-7c4d-8e5f-a0b1c2d3e4f5";
        let t = RunTrace::of(run_id, Some(VALID));
        let tp = TraceParent::parse(VALID).unwrap();
        assert_eq!(t.trace_id, tp.trace_id);
        assert_eq!(t.parent, Some(tp.parent_id));
        assert_eq!(t.span_id, RunTrace::of(run_id, None).span_id);
        assert_eq!(
            RunTrace::of(run_id, Some("nonsense")),
            RunTrace::of(run_id, None),
            "an invalid stored value is no parent"
        );
        let unsampled = RunTrace::of(run_id, Some(&VALID.replace("-01", "-00")));
        assert!(!unsampled.sampled);
        assert!(unsampled.traceparent().ends_with("-00"));
    }

    #[test]
    fn ids_that_are_not_uuids_still_give_valid_ids() {
        let t = RunTrace::of("r", None);
        assert_ne!(t.trace_id, TraceId::INVALID);
        assert_ne!(t.span_id, SpanId::INVALID);
        assert_ne!(RunTrace::of("s", None).trace_id, t.trace_id);
    }
}
