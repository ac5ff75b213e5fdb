//! The state enums of records that move through a lifecycle (revocation and certificate
//! requests, discovery scans, devices, ACME accounts, orders, authorizations and challenges).
//! Each is stored as its name; the store parses the name back and reports an unknown one as
//! corrupt data instead of carrying a free string.

/// Declares a state enum: its variants with their stored names (the names the API shows),
/// `ALL`, `as_str`, `parse` and `Display` (the name).
macro_rules! state_enum {
    ($(#[$meta:meta])* $vis:vis enum $name:ident { $($(#[$doc:meta])* $variant:ident => $text:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        $vis enum $name {
            $($(#[$doc])* $variant,)+
        }

        impl $name {
            /// Every state, in the order the API lists them.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The stored (and shown) name.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }

            /// The state of a stored name; `None` for a name that is none of them.
            pub fn parse(text: &str) -> Option<$name> {
                match text {
                    $($text => Some($name::$variant),)+
                    _ => None,
                }
            }

            /// The names, comma-separated (for messages listing what is accepted).
            pub fn names() -> String {
                $name::ALL.iter().map(|state| state.as_str()).collect::<Vec<_>>().join(", ")
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }
    };
}

pub(crate) use state_enum;

state_enum! {
    /// Where a discovery scan is: `pending` until a worker claims it, `running`, then one of the
    /// three terminal states. Here rather than in `discovery` because the
    /// `discovery.scan_completed` event carries it as well.
    pub enum ScanStatus {
        Pending => "pending",
        Running => "running",
        Completed => "completed",
        Failed => "failed",
        Cancelled => "cancelled",
    }
}

#[cfg(test)]
mod tests {
    state_enum! {
        enum Light {
            Red => "red",
            Green => "green",
        }
    }

    #[test]
    fn names_round_trip_and_unknown_names_do_not_parse() {
        for &light in Light::ALL {
            assert_eq!(Light::parse(light.as_str()), Some(light));
            assert_eq!(light.to_string(), light.as_str());
            assert_eq!(serde_json::to_value(light).unwrap(), serde_json::json!(light.as_str()));
        }
        assert_eq!(Light::parse("Red"), None);
        assert_eq!(Light::parse(""), None);
        assert_eq!(Light::names(), "red, green");
    }

    /// The stored and shown names, in the order validation messages list them: what the
    /// records held as strings before they were typed.
    #[test]
    fn record_states_keep_their_names() {
        use crate::acme::{AccountStatus, AuthorizationStatus, ChallengeStatus, OrderStatus};
        use crate::attestation::devices::DeviceStatus;
        use crate::certificates::revocation_requests::RevocationStatus;
        use crate::issuance::requests::RequestStatus;
        use crate::state::ScanStatus;
        assert_eq!(RevocationStatus::names(), "pending, approved, rejected, failed");
        assert_eq!(RequestStatus::names(), "pending, approved, issuing, issued, rejected, failed");
        assert_eq!(ScanStatus::names(), "pending, running, completed, failed, cancelled");
        assert_eq!(DeviceStatus::names(), "registered, enrolled, attested, failed, disabled");
        // RFC 8555 §7.1.6's names, which ACME clients read.
        assert_eq!(AccountStatus::names(), "valid, deactivated, revoked");
        assert_eq!(OrderStatus::names(), "pending, ready, processing, valid, invalid");
        assert_eq!(AuthorizationStatus::names(), "pending, valid, invalid, deactivated, expired, revoked");
        assert_eq!(ChallengeStatus::names(), "pending, processing, valid, invalid");
    }
}
