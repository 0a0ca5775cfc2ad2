//! The live view on a terminal: the ratatui dashboard in the alternate
//! screen, redrawn four times a second on a thread of its own (never on the
//! client's runtime), and the terminal put back as it was — after the run,
//! after Ctrl-C, and on a panic.
//!
//! Raw mode is not used: Ctrl-C stays a signal, which the run turns into a
//! clean stop (in-flight requests recorded as cancelled). Only echo and line
//! editing are turned off, so keys typed during the run do not scribble on
//! the dashboard (ratatui redraws only what changed, so they would stay).

use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::{cursor, execute, terminal};
use ratatui::Terminal;
use std::io::Stdout;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tokenscope_report::dashboard::{self, View};

/// The alternate screen, left when dropped.
pub struct Screen {
    terminal: Terminal<CrosstermBackend<Stdout>>,
}

/// The terminal's settings before the dashboard, to put back.
static SAVED_TERMIOS: std::sync::Mutex<Option<libc::termios>> = std::sync::Mutex::new(None);

/// Turns off echo and line editing on stdin's terminal (signals stay on).
fn quiet_input() {
    // SAFETY: tcgetattr/tcsetattr on fd 0 with a termios we own; failures
    // (stdin not a terminal) leave everything as it was.
    unsafe {
        let mut t: libc::termios = std::mem::zeroed();
        if libc::tcgetattr(libc::STDIN_FILENO, &mut t) != 0 {
            return;
        }
        if let Ok(mut saved) = SAVED_TERMIOS.lock() {
            saved.get_or_insert(t);
        }
        t.c_lflag &= !(libc::ECHO | libc::ICANON);
        libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &t);
    }
}

fn restore() {
    if let Ok(Some(t)) = SAVED_TERMIOS.lock().map(|mut s| s.take()) {
        // SAFETY: drops the keys typed during the run (the shell would run
        // them as a command) and puts back the settings `quiet_input` read.
        unsafe {
            libc::tcflush(libc::STDIN_FILENO, libc::TCIFLUSH);
            libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &t);
        }
    }
    let _ = execute!(
        std::io::stdout(),
        terminal::LeaveAlternateScreen,
        cursor::Show
    );
}

impl Screen {
    pub fn enter() -> std::io::Result<Screen> {
        execute!(
            std::io::stdout(),
            terminal::EnterAlternateScreen,
            cursor::Hide
        )?;
        quiet_input();
        // A panic anywhere leaves the screen first, so its message is readable.
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            previous(info);
        }));
        let terminal = Terminal::new(CrosstermBackend::new(std::io::stdout()))?;
        Ok(Screen { terminal })
    }

    pub fn draw(&mut self, view: &View) {
        let _ = self.terminal.draw(|f| dashboard::draw(f, view));
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        restore();
    }
}

/// A dashboard redrawn on its own thread from `sample`, until stopped.
pub struct Dashboard {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Dashboard {
    /// Enters the alternate screen and starts redrawing; `sample` builds each
    /// frame's view. `None` when the terminal refused (the run goes on without it).
    pub fn start(mut sample: impl FnMut() -> View + Send + 'static) -> Option<Dashboard> {
        let mut screen = Screen::enter().ok()?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("ui-dashboard".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    screen.draw(&sample());
                    std::thread::sleep(Duration::from_millis(250));
                }
                // The screen is dropped here: the terminal is restored.
            })
            .ok()?;
        Some(Dashboard {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops redrawing and restores the terminal.
    pub fn stop(mut self) {
        self.finish();
    }

    fn finish(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        self.finish();
    }
}

/// Output tokens/s per second, from a growing counter.
pub struct Rate {
    last: Option<(f64, u64)>,
    pub history: Vec<u64>,
}

impl Default for Rate {
    fn default() -> Rate {
        Rate::new()
    }
}

impl Rate {
    pub fn new() -> Rate {
        Rate {
            last: None,
            history: Vec::new(),
        }
    }

    /// Feeds the counter's value at time `t_s`; adds a point each second.
    pub fn feed(&mut self, t_s: f64, total: u64) {
        match self.last {
            None => self.last = Some((t_s, total)),
            Some((t0, n0)) if t_s - t0 >= 1.0 => {
                let rate = total.saturating_sub(n0) as f64 / (t_s - t0);
                self.history.push(rate.round() as u64);
                if self.history.len() > 240 {
                    self.history.remove(0);
                }
                self.last = Some((t_s, total));
            }
            _ => {}
        }
    }
}
