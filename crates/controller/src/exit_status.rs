//! Exit statuses of `sluice migrate`, its report and its `--to gateway-api` form alike.

/// Every Ingress would be served (or carried) as it is today.
pub const EXIT_CLEAN: i32 = 0;
/// Some Ingress needs a change: an annotation that is unsupported, invalid or a refused
/// snippet, a class sluice would not serve, or something `--to` could not carry.
pub const EXIT_CHANGES: i32 = 1;
/// The Ingresses could not be read (directory, file or cluster), or the output written.
pub const EXIT_ERROR: i32 = 2;
