//! ctrlrun core: at-most-once execution of side effects, keyed by an effect key.
//!
//! The core is plain Rust and is tested without Python (`cargo test`):
//! - [`template`]: effect-key templates (`"refund:{payment_id}"`), parsed once, rendered per call;
//! - [`record`]: [`EffectRecord`] and [`EffectState`], the row every backend stores;
//! - [`planner`]: the pure decisions (reservation, later transitions, lease extension, resolution);
//! - [`store`]: the [`Store`] trait and its backends, which only write what the planner decided;
//! - [`url`]: store URLs (`sqlite:///state.db`).
//!
//! The PyO3 binding (`ctrlrun._core`) lives in `src/py/` behind the `python` feature.

pub mod approval;
pub mod env;
pub mod error;
pub mod fingerprint;
mod named;
pub mod planner;
pub mod receipt;
pub mod record;
pub mod store;
pub mod template;
pub mod url;

#[cfg(feature = "python")]
mod py;

pub use error::{Error, Result};
pub use record::{EffectRecord, EffectState, Micros};
pub use store::{open_store, Store, Transition};
pub use template::Template;
