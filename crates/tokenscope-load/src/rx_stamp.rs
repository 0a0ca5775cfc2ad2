//! Reads stamped by the kernel: the instant a read's bytes reached the
//! socket, not the instant the client got round to reading them.
//!
//! With `SO_TIMESTAMPNS` set on a TCP socket, `recvmsg` hands back the
//! arrival time of the last segment it read (Linux: `tcp_recv_timestamp`).
//! A token's stamp then no longer depends on how quickly the client's thread
//! woke up, so the client may let wake-ups gather (see
//! [`crate::runtime::WakeBatch`]) without its figures losing precision.
//! The kernel stamps on `CLOCK_REALTIME`; each stamp is turned into an
//! `Instant` by its age (realtime now − stamp), the realtime clock read
//! beside an `Instant`.

use std::io;
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Asks the kernel to stamp arrivals on this socket. `false` where it
/// cannot (another OS, or the option refused): reads are then stamped when
/// the client reads them.
pub fn enable(socket: &TcpStream) -> bool {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let on: libc::c_int = 1;
        // SAFETY: a valid socket descriptor and a c_int option of its size.
        let rc = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_TIMESTAMPNS,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        rc == 0
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = socket;
        false
    }
}

/// Kernel stamping held on for as long as this lives (a loopback pair of
/// sockets that asked for it).
pub struct StampingOn {
    _rx: TcpStream,
    _tx: TcpStream,
}

/// Waits until the kernel stamps reads, and keeps it so. Linux switches
/// stamping on system-wide a moment after the first socket asks, and off a
/// moment after the last one closes (a deferred static-key switch); reads
/// in between come unstamped. Probing a loopback pair of its own before a
/// run's connections open makes the run's first reads stamped too. `None`
/// when it did not come on within `limit` (reads are then counted as
/// unstamped, and stamped when read).
pub fn wait_until_on(limit: Duration) -> Option<StampingOn> {
    use std::io::Write;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").ok()?;
    let mut tx = TcpStream::connect(listener.local_addr().ok()?).ok()?;
    let (rx, _) = listener.accept().ok()?;
    rx.set_nonblocking(true).ok()?;
    if !enable(&rx) {
        return None;
    }
    let deadline = Instant::now() + limit;
    let mut buf = [0u8; 64];
    loop {
        tx.write_all(b"x").ok()?;
        std::thread::sleep(Duration::from_millis(1));
        if let Ok((_, Some(_))) = read(&rx, &mut buf) {
            return Some(StampingOn { _rx: rx, _tx: tx });
        }
        if Instant::now() >= deadline {
            return None;
        }
    }
}

/// One non-blocking read into `buf`: the bytes read and, when the kernel
/// stamped them, the arrival of the last of them.
#[cfg(target_os = "linux")]
pub fn read(socket: &TcpStream, buf: &mut [u8]) -> io::Result<(usize, Option<Instant>)> {
    use std::os::fd::AsRawFd;
    // Room for one SCM_TIMESTAMPNS control message (a timespec), aligned.
    #[repr(C, align(8))]
    struct Control([u8; 64]);
    let mut control = Control([0; 64]);
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: an all-zero msghdr is valid; the pointers set below outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.0.as_mut_ptr().cast();
    msg.msg_controllen = control.0.len() as _;
    // SAFETY: `msg` describes `buf` and `control`, both valid for writes.
    let n = unsafe { libc::recvmsg(socket.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((n as usize, stamp_of(&msg)))
}

#[cfg(not(target_os = "linux"))]
pub fn read(socket: &TcpStream, buf: &mut [u8]) -> io::Result<(usize, Option<Instant>)> {
    use std::io::Read;
    Ok(((&mut &*socket).read(buf)?, None))
}

/// The arrival instant in a `recvmsg`'s control messages, if there is one.
#[cfg(target_os = "linux")]
#[allow(clippy::useless_conversion)] // time_t is i64 here, i32 on 32-bit targets
fn stamp_of(msg: &libc::msghdr) -> Option<Instant> {
    // SAFETY: the CMSG_* walk stays within the control buffer `msg` names,
    // which the kernel filled.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                return from_realtime(i64::from(ts.tv_sec), i64::from(ts.tv_nsec));
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    None
}

/// A `CLOCK_REALTIME` stamp as an `Instant`, by its age now (the realtime
/// clock read beside an `Instant`). A stamp from the future (a clock step
/// between the two readings) reads as now; one older than a minute is not
/// believed.
#[cfg(target_os = "linux")]
fn from_realtime(sec: i64, nsec: i64) -> Option<Instant> {
    use tokenscope_core::clock::{beside_instant, clock_ns, CLOCK_REALTIME};
    if sec == 0 {
        return None;
    }
    let (now, real_ns) = beside_instant(|| clock_ns(CLOCK_REALTIME))?;
    let age_ns = real_ns - (i128::from(sec) * 1_000_000_000 + i128::from(nsec));
    match age_ns {
        ..0 => Some(now),
        0..60_000_000_000 => now.checked_sub(Duration::from_nanos(age_ns as u64)),
        _ => None,
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_read_carries_the_instant_its_bytes_arrived_not_when_it_was_read() {
        // The kernel turns stamping on system-wide a moment after the first
        // socket asks: until then reads come unstamped.
        let _on = wait_until_on(Duration::from_secs(5)).expect("the kernel never stamped a read");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut tx = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (rx, _) = listener.accept().unwrap();
        rx.set_nonblocking(true).unwrap();
        assert!(enable(&rx));
        let mut buf = [0u8; 64];
        let before = Instant::now();
        tx.write_all(b"token").unwrap();
        // Loopback delivers during the write: its return bounds the arrival
        // (a preemption before it only moves the bound later).
        let written = Instant::now();
        std::thread::sleep(Duration::from_millis(30));
        let (n, at) = read(&rx, &mut buf).unwrap();
        assert_eq!(&buf[..n], b"token");
        let at = at.expect("stamped once stamping is on");
        // Read 30 ms or more after it arrived, stamped when it arrived:
        // between the write's start and its return (1 ms for the mapping of
        // the kernel's realtime stamp; 15 ms short of the read).
        let slack = Duration::from_millis(1);
        assert!(at + slack >= before, "stamped before the write");
        assert!(
            at <= written + Duration::from_millis(15),
            "stamped {:?} after the write returned",
            at.duration_since(written)
        );
        // Nothing to read: WouldBlock, not a stamp.
        let e = read(&rx, &mut buf).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
    }
}
