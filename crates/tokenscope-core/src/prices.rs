//! Default GPU prices for `--gpu-type`, $/GPU-hour, on-demand. Prices move:
//! each entry names its source and date; `--gpu-price` overrides. Why these and
//! how volatile: docs/engines.md §6.

/// (name, $/GPU-hour, source and date)
pub const PRICES: &[(&str, f64, &str)] = &[
    ("rtx-4090", 0.60, "RunPod on-demand pods, Mar 2026"),
    ("l4", 0.78, "RunPod on-demand pods, Mar 2026"),
    ("a10g", 1.006, "AWS g5.xlarge on-demand us-east-1, Jun 2026"),
    ("l40s", 1.40, "RunPod on-demand pods, Mar 2026"),
    ("mi300x", 1.71, "TensorWave list price, 2026"),
    (
        "a100-40gb",
        1.844,
        "AWS EC2 Capacity Blocks (A100), rates valid until 2025-01-01",
    ),
    (
        "a100-80gb",
        2.45,
        "RunPod on-demand pods (A100 SXM 80GB), Mar 2026",
    ),
    ("h100-pcie", 3.51, "RunPod on-demand pods, Mar 2026"),
    ("h100-sxm", 4.76, "RunPod on-demand pods, Mar 2026"),
    ("h200", 6.35, "RunPod on-demand pods, Mar 2026"),
    ("b200", 10.57, "RunPod on-demand pods, Mar 2026"),
];

/// The default price of a GPU type, with its source.
pub fn price(gpu_type: &str) -> Result<(f64, &'static str), String> {
    let want = gpu_type.to_ascii_lowercase().replace(['_', ' '], "-");
    PRICES
        .iter()
        .find(|(n, _, _)| *n == want)
        .map(|(_, p, s)| (*p, *s))
        .ok_or_else(|| {
            let known: Vec<&str> = PRICES.iter().map(|p| p.0).collect();
            format!(
                "no default price for `{gpu_type}`; known: {} (or give --gpu-price)",
                known.join(", ")
            )
        })
}

#[cfg(test)]
mod tests {
    #[test]
    fn known_and_unknown() {
        assert_eq!(super::price("H100-SXM").unwrap().0, 4.76);
        assert!(super::price("tpu").unwrap_err().contains("h100-sxm"));
    }
}
