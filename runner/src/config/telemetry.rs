//! `[telemetry]`: the metrics address without the token and the OTLP trace export.
//!
//! What it guarantees: an OTLP endpoint that cannot be turned into a traces URL, and an
//! empty service name, are refused at load with the key named.

use serde::Deserialize;

use super::Invalid;

/// The `[telemetry]` settings. `GET /metrics` (behind the API token) is always served.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// An address (`127.0.0.1:9464`) that serves the same metrics at `GET /metrics` without
    /// the token, for a Prometheus that holds none. Default none. Bind it to loopback or a
    /// private network: the metrics name agents, tools, hooks and schedules.
    pub metrics_address: Option<std::net::SocketAddr>,
    /// An OpenTelemetry collector's OTLP/HTTP address (`http://127.0.0.1:4318`): `serve`
    /// exports a trace per run to `<endpoint>/v1/traces`. Default none (no traces).
    pub otlp_endpoint: Option<String>,
    /// The traces' `service.name`. Default `nightshift`.
    pub service_name: String,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            metrics_address: None,
            otlp_endpoint: None,
            service_name: "nightshift".into(),
        }
    }
}

impl TelemetryConfig {
    pub(crate) fn validate(&self) -> Result<(), Invalid> {
        if let Some(endpoint) = &self.otlp_endpoint {
            nightshift_telemetry::traces::traces_url(endpoint)?;
        }
        if self.service_name.trim().is_empty() {
            return Err(Invalid::value(
                "telemetry.service_name",
                "is empty; leave it out for \"nightshift\"",
            ));
        }
        Ok(())
    }
}
