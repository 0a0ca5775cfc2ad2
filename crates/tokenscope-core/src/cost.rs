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
    /// With reasoning: per 1K answer tokens. Thinking is paid for like any
    /// token but is not what the user reads, so this is the dearer figure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usd_per_1k_answer_tokens: Option<f64>,
    /// Per request that answered (a spent thinking budget did not): what a
    /// reasoning or agent service pays for one answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usd_per_answer: Option<f64>,
}

/// What a window produced, for [`GpuPrice::cost`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Produced {
    pub output_tokens: u64,
    pub total_tokens: u64,
    /// With `--slo`: output tokens of requests that met it.
    pub good_output_tokens: Option<u64>,
    /// With reasoning: output tokens less reasoning tokens.
    pub answer_tokens: Option<u64>,
    /// Requests that answered.
    pub answers: u64,
}

impl GpuPrice {
    pub fn cost(&self, window_s: f64, made: Produced) -> Cost {
        let window_usd = self.usd_per_gpu_hour * self.gpus as f64 * window_s / 3600.0;
        let per = |tokens: u64, unit: f64| (tokens > 0).then(|| window_usd / tokens as f64 * unit);
        Cost {
            usd_per_gpu_hour: self.usd_per_gpu_hour,
            gpus: self.gpus,
            window_usd,
            usd_per_1k_output_tokens: per(made.output_tokens, 1e3),
            usd_per_1m_output_tokens: per(made.output_tokens, 1e6),
            usd_per_1k_total_tokens: per(made.total_tokens, 1e3),
            usd_per_1k_good_output_tokens: made.good_output_tokens.and_then(|t| per(t, 1e3)),
            usd_per_1k_answer_tokens: made.answer_tokens.and_then(|t| per(t, 1e3)),
            usd_per_answer: per(made.answers, 1.0),
        }
    }
}

impl Cost {
    /// Every per-unit figure, for scaling them all by one factor.
    pub fn per_unit_mut(&mut self) -> impl Iterator<Item = &mut f64> {
        [
            &mut self.usd_per_1k_output_tokens,
            &mut self.usd_per_1m_output_tokens,
            &mut self.usd_per_1k_total_tokens,
            &mut self.usd_per_1k_good_output_tokens,
            &mut self.usd_per_1k_answer_tokens,
            &mut self.usd_per_answer,
        ]
        .into_iter()
        .flatten()
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
        let made = Produced {
            output_tokens: 1_000_000,
            total_tokens: 3_000_000,
            good_output_tokens: Some(500_000),
            answer_tokens: Some(250_000),
            answers: 2_000,
        };
        let c = price.cost(3600.0, made);
        assert!((c.window_usd - 5.0).abs() < 1e-12);
        assert!((c.usd_per_1k_output_tokens.unwrap() - 0.005).abs() < 1e-12);
        assert!((c.usd_per_1m_output_tokens.unwrap() - 5.0).abs() < 1e-12);
        assert!((c.usd_per_1k_total_tokens.unwrap() - 5.0 / 3000.0).abs() < 1e-12);
        assert!((c.usd_per_1k_good_output_tokens.unwrap() - 0.01).abs() < 1e-12);
        assert!((c.usd_per_1k_answer_tokens.unwrap() - 0.02).abs() < 1e-12);
        assert!((c.usd_per_answer.unwrap() - 0.0025).abs() < 1e-12);
        let nothing = price.cost(10.0, Produced::default());
        assert_eq!(nothing.usd_per_1k_output_tokens, None);
        assert_eq!(nothing.usd_per_answer, None);
        assert_eq!(nothing.usd_per_1k_answer_tokens, None);
    }
}
