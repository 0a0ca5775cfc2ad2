//! CPU time of the process's threads, grouped by thread-name prefix, so the
//! client's own cost is measured apart from a built-in server in the same
//! process. Linux (`/proc/self/task`); `None` elsewhere.

use std::time::Duration;

/// Sum of user + system CPU time of threads whose name starts with `prefix`,
/// and how many such threads there are.
pub fn thread_cpu(prefix: &str) -> Option<(Duration, usize)> {
    let ticks = clock_ticks_per_second()?;
    let mut total = 0u64;
    let mut threads = 0;
    for entry in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let dir = entry.path();
        let Ok(comm) = std::fs::read_to_string(dir.join("comm")) else {
            continue;
        };
        if !comm.trim_end().starts_with(prefix) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(dir.join("stat")) else {
            continue;
        };
        // Fields after the parenthesised name: state is field 3, utime 14, stime 15.
        let Some(after) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
            continue;
        };
        let fields: Vec<&str> = after.split(' ').collect();
        let utime: u64 = fields.get(11).and_then(|f| f.parse().ok()).unwrap_or(0);
        let stime: u64 = fields.get(12).and_then(|f| f.parse().ok()).unwrap_or(0);
        total += utime + stime;
        threads += 1;
    }
    Some((
        Duration::from_secs_f64(total as f64 / ticks as f64),
        threads,
    ))
}

/// The process's peak resident memory so far (`VmHWM`), bytes. Linux only.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn clock_ticks_per_second() -> Option<u64> {
    if cfg!(target_os = "linux") {
        Some(100) // USER_HZ is 100 on every Linux architecture's userspace ABI
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_a_busy_thread() {
        let handle = std::thread::Builder::new()
            .name("ts-cputest".into())
            .spawn(|| {
                let start = std::time::Instant::now();
                let mut x = 0u64;
                while start.elapsed() < Duration::from_millis(300) {
                    x = x.wrapping_mul(31).wrapping_add(1);
                }
                let (cpu, n) = thread_cpu("ts-cputest").unwrap();
                (cpu, n, x)
            })
            .unwrap();
        let (cpu, n, _) = handle.join().unwrap();
        assert_eq!(n, 1);
        // A loaded machine may give the thread less than the wall time, never more.
        assert!(
            cpu > Duration::from_millis(30) && cpu < Duration::from_millis(500),
            "{cpu:?}"
        );
    }
}
