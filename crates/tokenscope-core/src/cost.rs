//! Cost per token: GPU $/hour × GPUs × window hours ÷ tokens.

use serde::{Deserialize, Serialize};

/// What the operator pays for the GPUs behind the server.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GpuPrice {
    /// US dollars per GPU-hour.
    pub usd_per_gpu_hour: f64,
    pub gpus: u32,
}

/// Cost of a run's window, per token kind.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Cost {
    pub usd_per_gpu_hour: f64,
    pub gpus: u32,
    /// Dollars spent over the measured window.
    pub window_usd: f64,
    pub usd_per_1k_output_tokens: Option<f64>,
    pub usd_per_1m_output_tokens: Option<f64>,
    pub usd_per_1k_total_tokens: Option<f64>,
    /// Per 1K output tokens of requests that met every SLO (`--slo`).
    pub usd_per_1k_good_output_tokens: Option<f64>,
}

impl GpuPrice {
    pub fn cost(
        &self,
        window_s: f64,
        output_tokens: u64,
        total_tokens: u64,
        good_output_tokens: Option<u64>,
    ) -> Cost {
        let window_usd = self.usd_per_gpu_hour * self.gpus as f64 * window_s / 3600.0;
        let per = |tokens: u64, unit: f64| (tokens > 0).then(|| window_usd / tokens as f64 * unit);
        Cost {
            usd_per_gpu_hour: self.usd_per_gpu_hour,
            gpus: self.gpus,
            window_usd,
            usd_per_1k_output_tokens: per(output_tokens, 1e3),
            usd_per_1m_output_tokens: per(output_tokens, 1e6),
            usd_per_1k_total_tokens: per(total_tokens, 1e3),
            usd_per_1k_good_output_tokens: good_output_tokens.and_then(|t| per(t, 1e3)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_hour_of_two_gpus() {
        let price = GpuPrice {
            usd_per_gpu_hour: 2.5,
            gpus: 2,
        };
        let c = price.cost(3600.0, 1_000_000, 3_000_000, Some(500_000));
        assert!((c.window_usd - 5.0).abs() < 1e-12);
        assert!((c.usd_per_1k_output_tokens.unwrap() - 0.005).abs() < 1e-12);
        assert!((c.usd_per_1m_output_tokens.unwrap() - 5.0).abs() < 1e-12);
        assert!((c.usd_per_1k_total_tokens.unwrap() - 5.0 / 3000.0).abs() < 1e-12);
        assert!((c.usd_per_1k_good_output_tokens.unwrap() - 0.01).abs() < 1e-12);
        assert_eq!(price.cost(10.0, 0, 0, None).usd_per_1k_output_tokens, None);
    }
}
