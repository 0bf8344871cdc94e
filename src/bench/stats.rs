//! Order statistics used by the report.
//!
//! Percentiles use linear interpolation between closest ranks (the
//! "type 7" definition, numpy's default): for sorted values `x[0..n]` and
//! `q` in 0..=100 the rank is `h = (n - 1) * q / 100`, and the result is
//! `x[floor(h)] + (h - floor(h)) * (x[floor(h) + 1] - x[floor(h)])`.
//! So p50 is the usual median and p99 of a small sample lies between its two
//! largest values. Non-finite values are ignored; an empty input gives `None`
//! (the report prints "–" rather than inventing a number).

/// The `q`-th percentile (0..=100) of `values`, or `None` if there are none.
pub fn percentile(values: &[f64], q: f64) -> Option<f64> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(|a, b| a.total_cmp(b));
    Some(percentile_sorted(&sorted, q))
}

/// [`percentile`] on values already sorted ascending (all finite, non-empty).
pub fn percentile_sorted(sorted: &[f64], q: f64) -> f64 {
    debug_assert!(!sorted.is_empty());
    let q = q.clamp(0.0, 100.0);
    let rank = (sorted.len() - 1) as f64 * q / 100.0;
    let low = rank.floor() as usize;
    let high = rank.ceil() as usize;
    let weight = rank - low as f64;
    sorted[low] + weight * (sorted[high] - sorted[low])
}

/// The median (p50).
pub fn median(values: &[f64]) -> Option<f64> {
    percentile(values, 50.0)
}

/// `numerator / denominator`, or `None` when either is missing or the
/// denominator is not positive.
pub fn ratio(numerator: Option<f64>, denominator: Option<f64>) -> Option<f64> {
    match (numerator, denominator) {
        (Some(n), Some(d)) if d > 0.0 && n.is_finite() && d.is_finite() => Some(n / d),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn empty_and_non_finite_give_none() {
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(percentile(&[f64::NAN, f64::INFINITY], 50.0), None);
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn single_value_is_every_percentile() {
        for q in [0.0, 1.0, 50.0, 99.0, 100.0] {
            assert_eq!(percentile(&[3.5], q), Some(3.5));
        }
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[5.0, 1.0, 3.0]), Some(3.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        // Order and NaNs do not matter.
        assert_eq!(median(&[2.0, f64::NAN, 1.0, 3.0]), Some(2.0));
    }

    #[test]
    fn interpolates_like_numpy_linear() {
        // numpy.percentile([1..=10], 99) == 9.91; p90 == 9.1; p25 == 3.25
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        assert!(close(percentile(&v, 99.0).unwrap(), 9.91));
        assert!(close(percentile(&v, 90.0).unwrap(), 9.1));
        assert!(close(percentile(&v, 25.0).unwrap(), 3.25));
        assert!(close(percentile(&v, 0.0).unwrap(), 1.0));
        assert!(close(percentile(&v, 100.0).unwrap(), 10.0));
        // Five repeats: p99 lies between the two largest.
        let five = [10.0, 12.0, 11.0, 30.0, 13.0];
        assert!(close(percentile(&five, 99.0).unwrap(), 13.0 + 0.96 * 17.0));
    }

    #[test]
    fn percentile_is_monotonic_in_q() {
        let v = [0.3, 7.0, 1.5, 2.25, 9.0, 4.0, 4.0];
        let mut last = f64::NEG_INFINITY;
        for q in 0..=100 {
            let p = percentile(&v, f64::from(q)).unwrap();
            assert!(p >= last);
            last = p;
        }
    }

    #[test]
    fn ratio_guards() {
        assert_eq!(ratio(Some(3.0), Some(2.0)), Some(1.5));
        assert_eq!(ratio(Some(3.0), Some(0.0)), None);
        assert_eq!(ratio(None, Some(2.0)), None);
        assert_eq!(ratio(Some(1.0), None), None);
    }
}
