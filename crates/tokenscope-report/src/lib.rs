//! Rendering results for people: the terminal summary ([`terminal`]), the
//! self-contained HTML report ([`html`]) with its charts ([`charts`]),
//! Markdown ([`markdown`]) and CSV exports ([`export`]), all read from a run
//! or sweep directory ([`run_dir`]).

pub mod charts;
pub mod dashboard;
pub mod dialects;
pub mod export;
pub mod fidelity;
pub mod health;
pub mod html;
pub mod markdown;
pub mod run_dir;
pub mod terminal;
