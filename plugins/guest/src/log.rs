//! Log lines into the host's log, with the plugin's name, version and the event id attached:
//! the raw `write`, and `info!`-style macros.

pub use crate::bindings::jobrelay::plugin::log::*;

/// Writes one line at `level`, formatted like `format!`.
#[macro_export]
macro_rules! log {
    ($level:ident, $($arg:tt)+) => {
        $crate::log::write($crate::log::Level::$level, &format!($($arg)+))
    };
}

/// `debug!("...")`: a line at debug level.
#[macro_export]
macro_rules! debug {
    ($($arg:tt)+) => { $crate::log!(Debug, $($arg)+) };
}

/// `info!("...")`: a line at info level.
#[macro_export]
macro_rules! info {
    ($($arg:tt)+) => { $crate::log!(Info, $($arg)+) };
}

/// `warn!("...")`: a line at warn level.
#[macro_export]
macro_rules! warn {
    ($($arg:tt)+) => { $crate::log!(Warn, $($arg)+) };
}

/// `error!("...")`: a line at error level.
#[macro_export]
macro_rules! error {
    ($($arg:tt)+) => { $crate::log!(Error, $($arg)+) };
}
