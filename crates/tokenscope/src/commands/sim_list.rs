//! `tokenscope sim list`: the models, GPUs and engine presets the
//! simulator knows (the built-in catalogue, or `--catalogue FILE`).

use crate::cli::ListArgs;
use crate::engine::catalogue;
use crate::exit::Exit;

pub fn run(args: ListArgs) -> anyhow::Result<Exit> {
    let cat = catalogue(args.catalogue.as_deref())?;
    crate::outln!("GPUs (dense peaks)      memory   bandwidth   BF16 TFLOPS   FP8 TFLOPS");
    for g in &cat.gpus {
        let fp8 = g.fp8_tflops.map_or("—".to_string(), |f| format!("{f:.0}"));
        crate::outln!(
            "  {:<20} {:>6.0} GiB {:>7.0} GB/s {:>12.0} {:>12}",
            g.name,
            g.memory_gib,
            g.bandwidth_gbs,
            g.bf16_tflops,
            fp8
        );
    }
    crate::outln!(
        "\nmodels                 params (active)  layers  hidden  heads/kv  KV bytes/token (BF16)"
    );
    for m in &cat.models {
        crate::outln!(
            "  {:<20} {:>6.1}B ({:>5.1}B) {:>7} {:>7} {:>5}/{:<4} {:>12.0}",
            m.name,
            m.params_b,
            m.active_params_b,
            m.layers,
            m.hidden,
            m.heads,
            m.kv_heads,
            m.kv_elements_per_token(1) * 2.0
        );
    }
    Ok(Exit::Success)
}
