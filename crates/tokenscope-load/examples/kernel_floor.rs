//! The kernel's floor for a streaming client on this host, for
//! `scripts/bench-client.sh`: the least any client pays to send a burst and
//! to read streams one token per read, so tokenscope's own figures can be
//! read against it.
//!
//! It opens N connections, sends one chat request on each in a tight loop
//! (the burst: its wall time and CPU per send), then reads every stream with
//! epoll and one `recv` per ready socket, counting SSE events and nothing
//! else: no parsing, no timestamps, no runtime, no allocation per read.
//!
//!     cargo run --release -p tokenscope-load --example kernel_floor -- PORT STREAMS TOKENS

use std::io::Write;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

fn cpu_seconds() -> f64 {
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

fn count(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len()).filter(|w| *w == needle).count()
}

fn main() -> std::io::Result<()> {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("PORT STREAMS TOKENS, as numbers"))
        .collect();
    let [port, n, tokens] = args[..] else {
        panic!("usage: kernel_floor PORT STREAMS TOKENS");
    };
    let mut streams: Vec<TcpStream> = (0..n)
        .map(|_| {
            let s = TcpStream::connect(("127.0.0.1", port as u16))?;
            s.set_nodelay(true)?;
            Ok(s)
        })
        .collect::<std::io::Result<_>>()?;
    std::thread::sleep(Duration::from_millis(200));
    let body = format!(
        r#"{{"model":"tokenscope-exact","messages":[{{"role":"user","content":"one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen"}}],"max_tokens":{tokens},"stream":true}}"#
    );
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let (cpu0, t0) = (cpu_seconds(), Instant::now());
    for s in &mut streams {
        s.write_all(request.as_bytes())?;
    }
    let (burst, burst_cpu) = (t0.elapsed(), cpu_seconds() - cpu0);

    let ep = unsafe { libc::epoll_create1(0) };
    for (i, s) in streams.iter().enumerate() {
        let mut e = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: i as u64,
        };
        unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, s.as_raw_fd(), &mut e) };
    }
    let mut done = vec![false; n as usize];
    let (mut left, mut events, mut reads) = (n, 0usize, 0usize);
    let mut buf = vec![0u8; 8192];
    let mut ready = vec![libc::epoll_event { events: 0, u64: 0 }; 256];
    let cpu1 = cpu_seconds();
    while left > 0 {
        let k = unsafe { libc::epoll_wait(ep, ready.as_mut_ptr(), 256, 10_000) };
        if k <= 0 {
            eprintln!("no event for 10 s with {left} streams left");
            break;
        }
        for e in &ready[..k as usize] {
            let i = e.u64 as usize;
            let fd = streams[i].as_raw_fd();
            let r = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
            reads += 1;
            let got = &buf[..r.max(0) as usize];
            events += count(got, b"data: ");
            if r <= 0 || count(got, b"[DONE]") > 0 {
                unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_DEL, fd, std::ptr::null_mut()) };
                if !std::mem::replace(&mut done[i], true) {
                    left -= 1;
                }
            }
        }
    }
    let read_cpu = cpu_seconds() - cpu1;
    println!(
        "{{\"streams\": {n}, \"burst_ms\": {:.3}, \"cpu_us_per_send\": {:.3}, \"events\": {events}, \"reads\": {reads}, \"cpu_us_per_event\": {:.3}}}",
        burst.as_secs_f64() * 1e3,
        burst_cpu / n as f64 * 1e6,
        read_cpu / events.max(1) as f64 * 1e6
    );
    Ok(())
}
