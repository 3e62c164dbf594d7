//! OpenTelemetry (feature `otel`): what idem tells about each call, and how
//! to export it.
//!
#![doc = include_str!("doc/telemetry.md")]

pub use idem_runtime::executor::{Meter, OTEL_SCOPE};

/// The release of OpenTelemetry's GenAI semantic conventions whose names
/// idem emits.
pub const GENAI_SEMCONV_VERSION: &str = "semantic-conventions-genai v0.1.0";
