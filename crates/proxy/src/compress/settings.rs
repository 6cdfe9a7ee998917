//! [`Compression`]: the global compression settings, with ingress-nginx's ConfigMap key
//! names, value syntax and defaults (`use-gzip`, `gzip-level`, `gzip-min-length`,
//! `gzip-types`, `gzip-disable`, `enable-brotli`, `brotli-level`, `brotli-min-length`,
//! `brotli-types`), and sluice's own `zstd` beside them. The same struct backs the flags
//! of `sluice serve` and `sluice controller`.

use super::negotiate::Coding;

/// ingress-nginx's `gzip-types` default (`internal/ingress/controller/config/config.go`).
pub const DEFAULT_GZIP_TYPES: &str = "application/atom+xml application/javascript \
application/x-javascript application/json application/rss+xml application/vnd.ms-fontobject \
application/x-font-ttf application/x-web-app-manifest+json application/xhtml+xml \
application/xml font/opentype image/svg+xml image/x-icon text/css text/javascript text/plain \
text/x-component";

/// ingress-nginx's `brotli-types` default: the gzip list with `application/xml+rss`.
pub const DEFAULT_BROTLI_TYPES: &str = "application/xml+rss application/atom+xml \
application/javascript application/x-javascript application/json application/rss+xml \
application/vnd.ms-fontobject application/x-font-ttf application/x-web-app-manifest+json \
application/xhtml+xml application/xml font/opentype image/svg+xml image/x-icon text/css \
text/javascript text/plain text/x-component";

/// Response compression, for every route that does not say otherwise
/// (`sluice.dev/compression`). `#[command(flatten)]` it into a clap command.
#[derive(clap::Args, Clone, Debug, PartialEq, Eq)]
pub struct Compression {
    /// Compress responses with gzip (ingress-nginx `use-gzip`).
    #[arg(long = "gzip", default_value = "false", value_name = "BOOL", value_parser = sluice_units::parse_bool, num_args = 0..=1,
          require_equals = true, default_missing_value = "true")]
    pub use_gzip: bool,

    /// gzip compression level, 1 (fastest) to 9 (ingress-nginx `gzip-level`).
    #[arg(long, value_name = "LEVEL", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=9))]
    pub gzip_level: u32,

    /// Smallest `Content-Length` compressed with gzip, in bytes (ingress-nginx
    /// `gzip-min-length`); bodies of unknown length are compressed.
    #[arg(long, value_name = "BYTES", default_value_t = 256)]
    pub gzip_min_length: u64,

    /// Media types compressed with gzip, space-separated, or `*` for all (ingress-nginx
    /// `gzip-types`); `text/html` always is.
    #[arg(long, value_name = "TYPES", default_value = DEFAULT_GZIP_TYPES, value_parser = parse_types)]
    pub gzip_types: MediaTypes,

    /// `User-Agent` regular expressions, space-separated, whose clients never get gzip
    /// (ingress-nginx `gzip-disable`; `msie6` stands for `MSIE [4-6]\.`).
    #[arg(long, value_name = "REGEXES", default_value = "", value_parser = parse_user_agents)]
    pub gzip_disable: UserAgents,

    /// Compress responses with brotli (ingress-nginx `enable-brotli`).
    #[arg(long = "brotli", default_value = "false", value_name = "BOOL", value_parser = sluice_units::parse_bool, num_args = 0..=1,
          require_equals = true, default_missing_value = "true")]
    pub enable_brotli: bool,

    /// brotli quality, 0 to 11 (ingress-nginx `brotli-level`).
    #[arg(long, value_name = "LEVEL", default_value_t = 4, value_parser = clap::value_parser!(u32).range(0..=11))]
    pub brotli_level: u32,

    /// Smallest `Content-Length` compressed with brotli, in bytes (ingress-nginx
    /// `brotli-min-length`).
    #[arg(long, value_name = "BYTES", default_value_t = 20)]
    pub brotli_min_length: u64,

    /// Media types compressed with brotli, space-separated, or `*` (ingress-nginx
    /// `brotli-types`); `text/html` always is.
    #[arg(long, value_name = "TYPES", default_value = DEFAULT_BROTLI_TYPES, value_parser = parse_types)]
    pub brotli_types: MediaTypes,

    /// Compress responses with zstd (sluice's own; ingress-nginx has no zstd).
    #[arg(long = "zstd", default_value = "false", value_name = "BOOL", value_parser = sluice_units::parse_bool, num_args = 0..=1,
          require_equals = true, default_missing_value = "true")]
    pub enable_zstd: bool,

    /// zstd level, 1 to 19 (3 is zstd's own default).
    #[arg(long, value_name = "LEVEL", default_value_t = 3, value_parser = clap::value_parser!(i32).range(1..=19))]
    pub zstd_level: i32,

    /// Smallest `Content-Length` compressed with zstd, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 256)]
    pub zstd_min_length: u64,

    /// Media types compressed with zstd, space-separated, or `*` (default: gzip's list);
    /// `text/html` always is.
    #[arg(long, value_name = "TYPES", default_value = DEFAULT_GZIP_TYPES, value_parser = parse_types)]
    pub zstd_types: MediaTypes,
}

impl Default for Compression {
    /// The same values as the flag defaults (ingress-nginx's): all off.
    fn default() -> Self {
        Compression {
            use_gzip: false,
            gzip_level: 1,
            gzip_min_length: 256,
            gzip_types: default_types(DEFAULT_GZIP_TYPES),
            gzip_disable: UserAgents::default(),
            enable_brotli: false,
            brotli_level: 4,
            brotli_min_length: 20,
            brotli_types: default_types(DEFAULT_BROTLI_TYPES),
            enable_zstd: false,
            zstd_level: 3,
            zstd_min_length: 256,
            zstd_types: default_types(DEFAULT_GZIP_TYPES),
        }
    }
}

fn default_types(list: &str) -> MediaTypes {
    parse_types(list).unwrap_or(MediaTypes::Any)
}

impl Compression {
    /// Which codings are on (per [`Coding`] index).
    pub(crate) fn enabled(&self) -> [bool; 3] {
        let mut on = [false; 3];
        on[Coding::Gzip as usize] = self.use_gzip;
        on[Coding::Brotli as usize] = self.enable_brotli;
        on[Coding::Zstd as usize] = self.enable_zstd;
        on
    }

    /// Whether any coding is on.
    pub(crate) fn any_enabled(&self) -> bool {
        self.use_gzip || self.enable_brotli || self.enable_zstd
    }

    /// The type list and minimum length of `coding`.
    pub(crate) fn rules(&self, coding: Coding) -> (&MediaTypes, u64) {
        match coding {
            Coding::Gzip => (&self.gzip_types, self.gzip_min_length),
            Coding::Brotli => (&self.brotli_types, self.brotli_min_length),
            Coding::Zstd => (&self.zstd_types, self.zstd_min_length),
        }
    }
}

/// A `*-types` value: media types (lower case, without parameters), or every type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MediaTypes {
    /// `*`: every type (a response without `Content-Type` still is not compressed).
    Any,
    /// These types.
    List(Vec<String>),
}

/// Parses a `*-types` value: media types separated by spaces (commas are taken too), or
/// `*`.
pub fn parse_types(text: &str) -> Result<MediaTypes, String> {
    let types: Vec<String> = text
        .split(|c: char| c.is_ascii_whitespace() || c == ',')
        .filter(|t| !t.is_empty())
        .map(str::to_ascii_lowercase)
        .collect();
    if types.iter().any(|t| t == "*") {
        return Ok(MediaTypes::Any);
    }
    for t in &types {
        let valid = t.split_once('/').is_some_and(|(kind, sub)| {
            let token = |s: &str| {
                !s.is_empty()
                    && s.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b))
            };
            token(kind) && token(sub)
        });
        if !valid {
            return Err(format!("{t:?} is not a media type (type/subtype)"));
        }
    }
    Ok(MediaTypes::List(types))
}

/// A `gzip-disable` value: `User-Agent` patterns.
#[derive(Clone, Debug, Default)]
pub struct UserAgents {
    /// The value as written (what equality compares).
    source: String,
    patterns: Vec<regex::bytes::Regex>,
}

impl PartialEq for UserAgents {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Eq for UserAgents {}

impl UserAgents {
    /// Whether `agent` matches one of the patterns.
    pub(crate) fn matches(&self, agent: &[u8]) -> bool {
        self.patterns.iter().any(|p| p.is_match(agent))
    }
}

/// Parses a `gzip-disable` value: regular expressions separated by spaces, matched
/// case-insensitively as nginx's `gzip_disable` does; `msie6` is nginx's shorthand.
pub fn parse_user_agents(text: &str) -> Result<UserAgents, String> {
    let patterns = text
        .split_ascii_whitespace()
        .map(|pattern| {
            let pattern = if pattern.eq_ignore_ascii_case("msie6") {
                r"MSIE [4-6]\."
            } else {
                pattern
            };
            regex::bytes::RegexBuilder::new(pattern)
                .case_insensitive(true)
                .build()
                .map_err(|e| format!("{pattern:?} is not a regular expression: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(UserAgents {
        source: text.trim().to_owned(),
        patterns,
    })
}
