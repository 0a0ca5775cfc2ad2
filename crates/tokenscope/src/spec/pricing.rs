//! What a run's GPUs cost: `--gpu-price`, or `--gpu-type`'s default price,
//! or the simulated GPU's; checked before any load, and turned into the
//! figures' price.

use crate::cli::{BenchArgs, BuiltinChoice, OutputArgs};
use crate::exit::Exit;
use tokenscope_core::cost::GpuPrice;
use tokenscope_core::metrics::Aggregator;

/// A simulated engine knows its GPU: without `--gpu-price`/`--gpu-type` it
/// is priced at that GPU's default price (when the table has one).
pub fn price_known_gpu(output: &mut OutputArgs, gpu: &str, gpus: u32) {
    if output.gpu_price.is_none()
        && output.gpu_type.is_none()
        && tokenscope_core::prices::price(gpu).is_ok()
    {
        output.gpu_type = Some(gpu.to_string());
        output.gpus = gpus;
        output.gpu_known = Some(gpu.to_string());
    }
}

/// Where the price came from, for `config.gpu_price_source` and the summary.
pub fn price_source(output: &OutputArgs) -> Option<String> {
    if output.gpu_price.is_some() {
        return Some("--gpu-price".into());
    }
    let t = output.gpu_type.as_deref()?;
    let (_, source) = tokenscope_core::prices::price(t).ok()?;
    let why = match &output.gpu_known {
        Some(_) => "the simulated GPU's default price",
        None => "--gpu-type default price",
    };
    Some(format!("{why} for {t} ({source})"))
}

/// Checks `--gpu-type` before any load is sent.
pub fn check_output(output: &OutputArgs) -> anyhow::Result<()> {
    if let (None, Some(t)) = (output.gpu_price, &output.gpu_type) {
        tokenscope_core::prices::price(t).map_err(|e| Exit::usage(format!("--gpu-type: {e}")))?;
    }
    Ok(())
}

/// What the run's GPUs cost, from `--gpu-price` or `--gpu-type`'s default.
pub fn price(output: &OutputArgs) -> Option<GpuPrice> {
    output
        .gpu_price
        .or_else(|| {
            output
                .gpu_type
                .as_deref()
                .and_then(|t| tokenscope_core::prices::price(t).ok())
                .map(|p| p.0)
        })
        .map(|p| GpuPrice {
            usd_per_gpu_hour: p,
            gpus: output.gpus,
        })
}

/// Takes a run's records one at a time into its figures, judged against
/// the run's `--slo` and costed at its price.
pub fn aggregator(output: &OutputArgs) -> Aggregator {
    Aggregator::new(output.slo.clone(), price(output))
}

/// The GPU the built-in engine models (Llama-3.1-8B on one H100 SXM).
pub const BUILTIN_GPU: &str = "h100-sxm";

/// The built-in engine knows its GPU: a run of it (no `--url`) is priced
/// unless told otherwise.
pub fn price_builtin(args: &mut BenchArgs) {
    if args.target.url.is_none() && args.builtin == BuiltinChoice::Engine {
        price_known_gpu(&mut args.output, BUILTIN_GPU, 1);
    }
}
