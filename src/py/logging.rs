//! Forwards the core's `log` records (warnings and errors, target `ctrlrun.store`) to Python's
//! `logging`, so the store's recovery branches show up where Python users look.

use pyo3::prelude::*;

struct PyLogger;

static LOGGER: PyLogger = PyLogger;

impl log::Log for PyLogger {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::Level::Warn && metadata.target().starts_with("ctrlrun")
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let level = match record.level() {
            log::Level::Error => 40,
            _ => 30,
        };
        let message = record.args().to_string();
        let target = record.target();
        // `try_attach` is None while the interpreter shuts down: the record is dropped then.
        let _ = Python::try_attach(|py| -> PyResult<()> {
            let logger = py.import("logging")?.call_method1("getLogger", (target,))?;
            logger.call_method1("log", (level, message))?;
            Ok(())
        });
    }

    fn flush(&self) {}
}

pub fn install() {
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(log::LevelFilter::Warn);
    }
}
