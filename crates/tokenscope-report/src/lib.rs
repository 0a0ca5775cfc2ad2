//! Everything tokenscope renders for people: the terminal summary
//! ([`terminal`]) and live dashboard ([`dashboard`]), the self-contained HTML
//! report ([`html`]) with its charts ([`charts`]), Markdown ([`markdown`]),
//! CSV exports ([`export`]) and the peers' JSON dialects ([`dialects`]) of a
//! run or sweep directory ([`run_dir`]); the sizing of `sim size`
//! ([`sizing`]), a configuration's trend from the history ([`trend`]) and
//! a tune's settings side by side ([`tune`]).
//! Health bands ([`health`]) and workload fidelity ([`fidelity`]) colour
//! them all.

pub mod adapters;
pub mod answers;
pub mod charts;
pub mod dashboard;
pub mod dialects;
pub mod export;
pub mod fidelity;
pub mod health;
pub mod html;
pub mod markdown;
pub mod media;
pub mod run_dir;
pub mod sizing;
pub mod terminal;
pub mod trend;
pub mod tune;
