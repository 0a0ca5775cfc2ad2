//! Properties of the series analysis over many random sweeps — clean and
//! noisy, saturating and not, with few requests a point and many:
//! - a series that never flattened has no knee and says so;
//! - a series that clearly saturated has one;
//! - every recommendation meets `--slo`, or is "none" with its reason;
//! - no SLO verdict rests on fewer requests than its rule needs, unless the
//!   sample already decides it — checked here against an exact binomial
//!   computation, independent of the interval code under test.

use proptest::prelude::*;
use tokenscope_core::analysis::{analyse, slo_capacity, Objectives, Point, PointSlo};
use tokenscope_core::mutate::Rng;
use tokenscope_core::slo::{quantile_of, ObjectiveResult, Slo, Verdict};
use tokenscope_core::stats::Distribution;

#[derive(Debug, Clone, Copy)]
enum Shape {
    /// tokens/s grows by `r` (1.75–2) with every doubling of load.
    Linear(f64),
    /// y = x / (1 + x/K): flat well before the top when K ≤ top/4.
    Saturating(f64),
}

/// A uniform number in [0, 1) from the seeded generator.
fn unit(rng: &mut Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

struct Case {
    loads: Vec<f64>,
    tps: Vec<f64>,
    /// Per point, the TTFT of every request in ms.
    ttft: Vec<Vec<f64>>,
}

fn case(shape: Shape, points: usize, noise: f64, requests: usize, seed: u64) -> Case {
    let mut rng = Rng(seed);
    let loads: Vec<f64> = (0..points).map(|i| 2f64.powi(i as i32)).collect();
    let tps = loads
        .iter()
        .enumerate()
        .map(|(i, &x)| {
            let clean = match shape {
                Shape::Linear(r) => 100.0 * r.powi(i as i32),
                Shape::Saturating(k) => 100.0 * x / (1.0 + x / k),
            };
            clean * (1.0 + noise * (2.0 * unit(&mut rng) - 1.0))
        })
        .collect();
    let ttft = loads
        .iter()
        .map(|&x| {
            // TTFT grows with load; a heavy right tail.
            let base = 20.0 + 4.0 * x;
            (0..requests)
                .map(|_| base * (1.0 + 2.0 * unit(&mut rng).powi(6)))
                .collect()
        })
        .collect();
    Case { loads, tps, ttft }
}

fn point(load: f64, tps: f64, ttft: &Distribution) -> Point {
    let s = ttft.summary(1e-3).unwrap();
    Point {
        load,
        output_tps: tps,
        per_user_tps: tps / load,
        ttft_p99_ms: s.p99,
        answer_start_p99_ms: None,
        tpot_p99_ms: 10.0,
        e2e_p99_ms: s.p99 + 1000.0,
        cost_per_1k: Some(1.0 / tps),
        answers_per_s: tps / 100.0,
        cost_per_answer: None,
        reasoning_share: None,
        gpu_util_pct: None,
        kv_usage_max: Some((load / 512.0).min(1.0)),
        preemptions: Some(0.0),
        failed: 0,
        overloaded: false,
        slo: None,
        spread: None,
        lag_p99_ms: None,
        lag_grows: false,
    }
}

/// P(Bin(n, p) ≤ k), exactly.
fn binom_cdf(n: u64, p: f64, k: u64) -> f64 {
    let mut term = (1.0 - p).powi(n as i32); // P(X = 0)
    let mut sum = term;
    for i in 0..k.min(n) {
        term *= (n - i) as f64 / (i + 1) as f64 * p / (1.0 - p);
        sum += term;
    }
    sum.min(1.0)
}

/// A verdict reached on fewer requests than the rule asks must be one the
/// sample forces: were the true quantile at the limit, seeing this few (or
/// this many) requests above it would be unlikely.
fn verdict_is_forced(o: &ObjectiveResult, values: &[f64]) -> Result<(), String> {
    let (Some(n), Some(needed), Some(v)) = (o.n, o.needed, o.verdict) else {
        return Err(format!("objective without its sample: {o:?}"));
    };
    if n >= needed || v == Verdict::NotEnoughData {
        return Ok(());
    }
    let Some(q) = quantile_of(&o.stat) else {
        return Ok(());
    };
    // HDR keeps 3 significant digits: count against the limit with that slack.
    let above = values.iter().filter(|&&x| x > o.limit_ms * 1.001).count() as u64;
    let at_or_below = values.iter().filter(|&&x| x <= o.limit_ms * 0.999).count() as u64;
    let chance = match v {
        Verdict::Met => binom_cdf(n, 1.0 - q, above),
        Verdict::NotMet => binom_cdf(n, q, at_or_below),
        Verdict::NotEnoughData => unreachable!(),
    };
    if chance > 0.1 {
        return Err(format!(
            "{v:?} on n = {n} < {needed} with {above} above the limit: chance {chance:.3} ({o:?})"
        ));
    }
    Ok(())
}

fn shape() -> impl Strategy<Value = Shape> {
    prop_oneof![
        (1.75f64..2.0).prop_map(Shape::Linear),
        (1.0f64..64.0).prop_map(Shape::Saturating),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn conclusions_hold_on_random_series(
        shape in shape(),
        points in 3usize..10,
        noise in 0.0f64..0.05,
        requests in prop_oneof![Just(8usize), Just(32), Just(200), Just(1200)],
        limit_ms in 25.0f64..400.0,
        stat in prop_oneof![Just("p50"), Just("p90"), Just("p99"), Just("max"), Just("mean")],
        seed in any::<u64>(),
    ) {
        let c = case(shape, points, noise, requests, seed);
        let slo = Slo::parse(&format!("ttft_{stat}={limit_ms}ms")).unwrap();
        let mut series = Vec::new();
        let mut judged = Vec::new();
        for ((&load, &tps), ttft) in c.loads.iter().zip(&c.tps).zip(&c.ttft) {
            let mut d = Distribution::new();
            ttft.iter().for_each(|v| d.record(v * 1e3));
            let estimate = d.summary(1e-3).unwrap().get(stat);
            let objectives: Vec<ObjectiveResult> =
                slo.objectives.iter().map(|o| o.judge(&d, estimate)).collect();
            for o in &objectives {
                let forced = verdict_is_forced(o, ttft);
                prop_assert!(forced.is_ok(), "{:?}", forced);
            }
            let mut p = point(load, tps, &d);
            p.slo = Some(PointSlo::judge(&objectives).0);
            series.push(p);
            judged.push(objectives);
        }
        let capacity = slo_capacity(&c.loads, &judged, slo.describe(), None);
        let a = analyse(series, Objectives::default(), Some(capacity));

        match shape {
            Shape::Linear(_) => {
                prop_assert!(a.knee.is_none(), "knee on a series that never bent: {:?} {:?}", a.knee, c.tps);
                let note = a.note.clone().unwrap_or_default();
                prop_assert!(note.starts_with("not saturated up to load"), "{}", note);
                let top = c.loads[points - 1];
                for r in a.recommendations.iter().filter(|r| r.load == Some(top)) {
                    prop_assert!(r.lower_bound, "top-point recommendation not marked: {:?}", r);
                }
            }
            Shape::Saturating(k) if k * 4.0 <= c.loads[points - 1] => {
                prop_assert!(a.knee.is_some(), "no knee on a saturated series: {:?}", c.tps);
            }
            Shape::Saturating(_) => {}
        }
        for r in &a.recommendations {
            match r.point {
                Some(i) => {
                    let p = &a.series[i];
                    prop_assert_eq!(p.slo.map(|s| s.verdict), Some(Verdict::Met), "{:?}", r);
                    // Independently: the point's own requests meet the limit
                    // at the estimate the summary shows, on enough of them
                    // or with the interval clear of it.
                    for o in &judged[i] {
                        prop_assert!(o.value_ms.unwrap() <= o.limit_ms, "{:?} at {:?}", r, o);
                        prop_assert!(o.n.unwrap() >= o.needed.unwrap()
                            || o.ci_high_ms.is_some_and(|h| h <= o.limit_ms)
                            || o.stat == "max", "{:?}", o);
                    }
                }
                None => prop_assert!(!r.why.is_empty(), "none without a reason: {:?}", r),
            }
        }
    }
}
