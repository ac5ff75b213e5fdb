//! The binding's configuration as operators write it ([`Config`], whose JSON Schema the host
//! shows), and what it compiles to ([`Rules`]). Compiling finds every problem at once, each
//! with the JSON pointer of its member: a member of the wrong type, a malformed range, an
//! unknown key algorithm, an unknown member (a typo must never silently widen the policy).

use std::borrow::Cow;
use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use trellis_plugin_sdk::{ConfigIssue, PluginError};

use crate::net::IpRange;

/// The policy binding's configuration. Every member is optional; an empty configuration allows
/// every request.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("additionalProperties" = false))]
pub struct Config {
    /// Every DNS name (and a DNS-looking common name) must equal one of these without its
    /// leading dot, or end with it dotted: `.example.com` and `example.com` both allow
    /// `example.com` and every name under it (case-insensitive, a trailing dot ignored).
    /// Absent: any name; empty: no DNS name at all.
    #[serde(default)]
    allowed_dns_suffixes: Option<Member<Vec<String>>>,
    /// Every IP address (and an IP-address common name) must fall in one of these CIDR ranges
    /// (`10.0.0.0/8`, `2001:db8::/32`; a bare address is that one address). Absent: any
    /// address; empty: no IP address at all.
    #[serde(default)]
    allowed_ip_ranges: Option<Member<Vec<String>>>,
    /// Whether `*.name` wildcard names are allowed (default true). A wildcard anywhere but as
    /// the whole left-most label is never allowed.
    #[serde(default)]
    #[schemars(extend("default" = true))]
    allow_wildcards: Option<Member<bool>>,
    /// Longer requests are not denied but shortened to this many days.
    #[serde(default)]
    #[schemars(range(min = 1))]
    max_validity_days: Option<Member<u32>>,
    /// The key algorithms allowed: `rsa`, `ecdsa-p256`, `ecdsa-p384`, `ecdsa-p521`, `ed25519`,
    /// `ed448`. Absent: any algorithm.
    #[serde(default)]
    #[schemars(extend("items" = {
        "type": "string",
        "enum": ["rsa", "ecdsa-p256", "ecdsa-p384", "ecdsa-p521", "ed25519", "ed448"]
    }))]
    allowed_key_algorithms: Option<Member<Vec<String>>>,
    /// The smallest RSA modulus accepted, in bits (default 2048, at least 1024).
    #[serde(default)]
    #[schemars(range(min = 1024, max = 16384), extend("default" = 2048))]
    min_rsa_bits: Option<Member<u32>>,
    /// Glob patterns (`*` is any run of characters, dots included) on DNS names and the common
    /// name: a match holds the request for a second person's approval, e.g.
    /// `*.prod.example.com`, `payments.*`.
    #[serde(default)]
    require_approval_for: Option<Member<Vec<String>>>,
    /// Limits the requests this policy judges; the others are allowed. Absent: every request.
    #[serde(default)]
    applies_to: Option<Member<AppliesToConfig>>,
    /// Members this policy does not know: each is a configuration error.
    #[serde(flatten)]
    #[schemars(skip)]
    unknown: BTreeMap<String, serde_json::Value>,
}

/// Which requests the policy judges. A request must match every list given.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("additionalProperties" = false))]
pub struct AppliesToConfig {
    /// CA types, e.g. `internal`, `acme` (case-insensitive).
    #[serde(default)]
    ca_types: Option<Member<Vec<String>>>,
    /// Template names or ids, e.g. `web_server` (exact). A request without a template never
    /// matches this list.
    #[serde(default)]
    templates: Option<Member<Vec<String>>>,
    #[serde(flatten)]
    #[schemars(skip)]
    unknown: BTreeMap<String, serde_json::Value>,
}

const TOP_LEVEL: &[&str] = &[
    "allowedDnsSuffixes",
    "allowedIpRanges",
    "allowWildcards",
    "maxValidityDays",
    "allowedKeyAlgorithms",
    "minRsaBits",
    "requireApprovalFor",
    "appliesTo",
];
const APPLIES_TO: &[&str] = &["caTypes", "templates"];

/// A member's value as written: its value when it has the member's type, else why not. Lets
/// one configuration report every member of the wrong type rather than only the first.
#[derive(Debug, Clone, PartialEq)]
pub enum Member<T> {
    /// The value, typed.
    Valid(T),
    /// Why the value does not have the member's type.
    Invalid(String),
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for Member<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        Ok(match serde_json::from_value(value) {
            Ok(value) => Member::Valid(value),
            Err(err) => Member::Invalid(err.to_string()),
        })
    }
}

/// The schema is the member type's own: `Member` only changes how errors are reported.
impl<T: JsonSchema> JsonSchema for Member<T> {
    fn inline_schema() -> bool {
        T::inline_schema()
    }

    fn schema_name() -> Cow<'static, str> {
        T::schema_name()
    }

    fn schema_id() -> Cow<'static, str> {
        T::schema_id()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        T::json_schema(generator)
    }
}

/// A key algorithm a policy can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyAlgorithm {
    Rsa,
    EcdsaP256,
    EcdsaP384,
    EcdsaP521,
    Ed25519,
    Ed448,
}

impl KeyAlgorithm {
    pub const ALL: [KeyAlgorithm; 6] = [
        KeyAlgorithm::Rsa,
        KeyAlgorithm::EcdsaP256,
        KeyAlgorithm::EcdsaP384,
        KeyAlgorithm::EcdsaP521,
        KeyAlgorithm::Ed25519,
        KeyAlgorithm::Ed448,
    ];

    /// The configuration's name of the algorithm.
    pub fn name(self) -> &'static str {
        match self {
            KeyAlgorithm::Rsa => "rsa",
            KeyAlgorithm::EcdsaP256 => "ecdsa-p256",
            KeyAlgorithm::EcdsaP384 => "ecdsa-p384",
            KeyAlgorithm::EcdsaP521 => "ecdsa-p521",
            KeyAlgorithm::Ed25519 => "ed25519",
            KeyAlgorithm::Ed448 => "ed448",
        }
    }

    fn parse(name: &str) -> Option<KeyAlgorithm> {
        KeyAlgorithm::ALL.into_iter().find(|algorithm| algorithm.name() == name)
    }
}

/// A DNS suffix, compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Suffix {
    /// As the configuration wrote it, for messages.
    pub written: String,
    /// Lowercase, without the leading and trailing dot.
    pub bare: String,
}

/// A `requireApprovalFor` pattern, compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    /// As the configuration wrote it, for reasons.
    pub written: String,
    /// Lowercase, without a trailing dot.
    pub glob: String,
}

/// `appliesTo`, compiled: `None` is every value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AppliesTo {
    pub ca_types: Option<Vec<String>>,
    pub templates: Option<Vec<String>>,
}

/// A valid configuration, ready to judge requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rules {
    /// `None`: any DNS name.
    pub dns_suffixes: Option<Vec<Suffix>>,
    /// `None`: any IP address.
    pub ip_ranges: Option<Vec<IpRange>>,
    pub allow_wildcards: bool,
    pub max_validity_days: Option<u32>,
    /// `None`: any key algorithm.
    pub key_algorithms: Option<Vec<KeyAlgorithm>>,
    pub min_rsa_bits: u32,
    pub approval_patterns: Vec<Pattern>,
    pub applies_to: AppliesTo,
}

pub const DEFAULT_MIN_RSA_BITS: u32 = 2048;
const MIN_RSA_BITS_FLOOR: u32 = 1024;
const MIN_RSA_BITS_CEILING: u32 = 16384;

/// Collects the problems of one configuration.
#[derive(Default)]
struct Issues(Vec<ConfigIssue>);

impl Issues {
    fn push(&mut self, field: String, message: impl Into<String>) {
        self.0.push(ConfigIssue { field, message: message.into() });
    }

    /// The member's value, or `None` (with an issue) when it has the wrong type.
    fn typed<'a, T>(&mut self, field: &str, member: Option<&'a Member<T>>) -> Option<&'a T> {
        match member? {
            Member::Valid(value) => Some(value),
            Member::Invalid(why) => {
                self.push(field.to_owned(), format!("wrong type: {why}"));
                None
            }
        }
    }

    fn unknown(&mut self, prefix: &str, unknown: &BTreeMap<String, serde_json::Value>, known: &[&str]) {
        for name in unknown.keys() {
            let hint = match closest(name, known) {
                Some(close) => format!("did you mean `{close}`? "),
                None => String::new(),
            };
            self.push(
                format!("{prefix}/{}", pointer_escape(name)),
                format!("unknown member; {hint}known members: {}", known.join(", ")),
            );
        }
    }
}

impl Rules {
    /// Compiles a configuration, or lists every problem in it.
    pub fn compile(config: &Config) -> Result<Rules, PluginError> {
        let mut issues = Issues::default();
        issues.unknown("", &config.unknown, TOP_LEVEL);

        let dns_suffixes = issues
            .typed("/allowedDnsSuffixes", config.allowed_dns_suffixes.as_ref())
            .map(|list| compile_list(&mut issues, "/allowedDnsSuffixes", list, suffix));
        let ip_ranges = issues
            .typed("/allowedIpRanges", config.allowed_ip_ranges.as_ref())
            .map(|list| compile_list(&mut issues, "/allowedIpRanges", list, |s| IpRange::parse(s)));
        let allow_wildcards = issues.typed("/allowWildcards", config.allow_wildcards.as_ref()).copied().unwrap_or(true);

        let max_validity_days = issues.typed("/maxValidityDays", config.max_validity_days.as_ref()).copied();
        if max_validity_days == Some(0) {
            issues.push("/maxValidityDays".into(), "must be at least 1 day");
        }

        let key_algorithms =
            issues.typed("/allowedKeyAlgorithms", config.allowed_key_algorithms.as_ref()).map(|list| {
                if list.is_empty() {
                    issues.push(
                        "/allowedKeyAlgorithms".into(),
                        format!("an empty list allows no key at all; name at least one of {}", known_algorithms()),
                    );
                }
                compile_list(&mut issues, "/allowedKeyAlgorithms", list, |name| {
                    KeyAlgorithm::parse(name)
                        .ok_or_else(|| format!("unknown key algorithm `{name}`; known: {}", known_algorithms()))
                })
            });

        let min_rsa_bits =
            issues.typed("/minRsaBits", config.min_rsa_bits.as_ref()).copied().unwrap_or(DEFAULT_MIN_RSA_BITS);
        if min_rsa_bits < MIN_RSA_BITS_FLOOR {
            issues.push("/minRsaBits".into(), format!("must be at least {MIN_RSA_BITS_FLOOR} (got {min_rsa_bits})"));
        } else if min_rsa_bits > MIN_RSA_BITS_CEILING {
            issues.push(
                "/minRsaBits".into(),
                format!("must be at most {MIN_RSA_BITS_CEILING} (got {min_rsa_bits}): no RSA key would be accepted"),
            );
        }

        let approval_patterns = issues
            .typed("/requireApprovalFor", config.require_approval_for.as_ref())
            .map(|list| compile_list(&mut issues, "/requireApprovalFor", list, pattern))
            .unwrap_or_default();

        let applies_to = match issues.typed("/appliesTo", config.applies_to.as_ref()) {
            Some(applies_to) => compile_applies_to(&mut issues, applies_to),
            None => AppliesTo::default(),
        };

        if !issues.0.is_empty() {
            return Err(PluginError::InvalidConfig(issues.0));
        }
        Ok(Rules {
            dns_suffixes,
            ip_ranges,
            allow_wildcards,
            max_validity_days,
            key_algorithms,
            min_rsa_bits,
            approval_patterns,
            applies_to,
        })
    }
}

fn compile_applies_to(issues: &mut Issues, config: &AppliesToConfig) -> AppliesTo {
    issues.unknown("/appliesTo", &config.unknown, APPLIES_TO);
    let mut names = |field: &str, member: Option<&Member<Vec<String>>>, what: &str| {
        let list = issues.typed(field, member)?;
        if list.is_empty() {
            issues.push(
                field.to_owned(),
                format!("an empty list matches no request; leave the member out to judge every {what}"),
            );
        }
        Some(compile_list(issues, field, list, |name| {
            if name.trim().is_empty() {
                Err("must not be empty".to_owned())
            } else {
                Ok(name.clone())
            }
        }))
    };
    AppliesTo {
        ca_types: names("/appliesTo/caTypes", config.ca_types.as_ref(), "CA type"),
        templates: names("/appliesTo/templates", config.templates.as_ref(), "template"),
    }
}

/// Compiles every element, recording an issue (at `field/index`) for each that does not.
fn compile_list<T>(
    issues: &mut Issues,
    field: &str,
    list: &[String],
    compile: impl Fn(&String) -> Result<T, String>,
) -> Vec<T> {
    list.iter()
        .enumerate()
        .filter_map(|(index, item)| match compile(item) {
            Ok(compiled) => Some(compiled),
            Err(why) => {
                issues.push(format!("{field}/{index}"), why);
                None
            }
        })
        .collect()
}

fn known_algorithms() -> String {
    KeyAlgorithm::ALL.map(KeyAlgorithm::name).join(", ")
}

fn suffix(written: &String) -> Result<Suffix, String> {
    let trimmed = written.strip_prefix('.').unwrap_or(written);
    let bare = trimmed.strip_suffix('.').unwrap_or(trimmed).to_ascii_lowercase();
    if bare.is_empty() {
        return Err(format!("`{written}` is empty: name a domain, e.g. `.example.com`"));
    }
    if bare.chars().any(char::is_whitespace) {
        return Err(format!("`{written}` contains spaces"));
    }
    if bare.contains('*') {
        return Err(format!(
            "`{written}` contains `*`: suffixes take no wildcards (`.example.com` allows every name under example.com)"
        ));
    }
    if !bare.is_ascii() {
        return Err(format!("`{written}` is not ASCII: write internationalized names as A-labels (`xn--…`)"));
    }
    if let Some(bad) = bare.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))) {
        return Err(format!("`{written}` contains `{bad}`, which no DNS name contains"));
    }
    if bare.split('.').any(str::is_empty) {
        return Err(format!("`{written}` has an empty label"));
    }
    Ok(Suffix { written: written.clone(), bare })
}

fn pattern(written: &String) -> Result<Pattern, String> {
    let glob = written.strip_suffix('.').unwrap_or(written).to_ascii_lowercase();
    if glob.is_empty() {
        return Err("an empty pattern matches nothing; write e.g. `*.prod.example.com`".to_owned());
    }
    if glob.chars().any(char::is_whitespace) {
        return Err(format!("`{written}` contains spaces"));
    }
    if !glob.is_ascii() {
        return Err(format!("`{written}` is not ASCII: write internationalized names as A-labels (`xn--…`)"));
    }
    if let Some(bad) = glob.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '*'))) {
        return Err(format!("`{written}` contains `{bad}`; patterns take DNS characters and `*`"));
    }
    Ok(Pattern { written: written.clone(), glob })
}

/// A JSON pointer token (RFC 6901).
fn pointer_escape(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

/// The known member closest to a misspelt one, if any is close.
fn closest<'a>(name: &str, known: &[&'a str]) -> Option<&'a str> {
    let name = name.to_ascii_lowercase();
    known
        .iter()
        .map(|candidate| {
            let lower = candidate.to_ascii_lowercase();
            // A truncated name (`maxValidity`) is as close as a misspelt one.
            let distance = if lower.starts_with(&name) && name.len() >= 4 { 1 } else { edit_distance(&name, &lower) };
            (distance, *candidate)
        })
        .filter(|(distance, candidate)| *distance <= 3.max(candidate.len() / 3))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

/// Levenshtein distance.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current.push(substitution.min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_misspellings_are_suggested() {
        assert_eq!(closest("allowedDnsSufixes", TOP_LEVEL), Some("allowedDnsSuffixes"));
        assert_eq!(closest("maxvaliditydays", TOP_LEVEL), Some("maxValidityDays"));
        assert_eq!(closest("allowedSuffixes", TOP_LEVEL), Some("allowedDnsSuffixes"));
        assert_eq!(closest("colour", TOP_LEVEL), None);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn the_schema_offers_exactly_the_known_key_algorithms() {
        let schema = trellis_plugin_sdk::testing::config_schema::<Config>();
        let offered = &schema["properties"]["allowedKeyAlgorithms"]["items"]["enum"];
        assert_eq!(offered, &serde_json::json!(KeyAlgorithm::ALL.map(KeyAlgorithm::name)));
    }

    #[test]
    fn suffixes_are_normalized() {
        let s = suffix(&".Example.COM.".to_owned()).unwrap();
        assert_eq!(s.bare, "example.com");
        assert_eq!(s.written, ".Example.COM.");
        assert_eq!(suffix(&"example.org".to_owned()).unwrap().bare, "example.org");
        for bad in ["", ".", "..", "exa mple.com", "*.example.com", "ex..ample.com", "https://example.com", "bücher.de"]
        {
            assert!(suffix(&bad.to_owned()).is_err(), "{bad:?} must be refused");
        }
    }
}
