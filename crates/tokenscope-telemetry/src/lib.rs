//! Telemetry: what the server says about itself while tokenscope loads it.
//! [`prometheus`] parses the text exposition format strictly; [`kinds`]
//! recognises the server from its metric names and maps its series onto one
//! vocabulary ([`kinds::Concepts`]); [`window`] turns the scrapes of a run into
//! window figures: counter deltas and rates, histogram quantiles from bucket
//! deltas, gauge means and trends. What a server does not expose stays `None`.

pub mod diagnose;
pub mod gpu;
pub mod kinds;
pub mod prometheus;
pub mod scraper;
pub mod spec_decode;
pub mod window;
