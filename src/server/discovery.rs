//! LAN discovery: mDNS / DNS-SD advertisement of the server (LAN mode only).
//!
//! When `hearth serve` listens beyond this machine (a non-loopback `--host`,
//! which already requires an API key), it announces itself on the local
//! network with multicast DNS so that agents and the menu-bar app of another
//! machine can find `http://HOST.local:PORT/v1` without typing an address.
//! Two services are registered, both on the served port:
//!
//! - `_hearth._tcp.local.`, the API, TXT `path=/v1`;
//! - `_http._tcp.local.`, the web UI (what browsers with a Bonjour list show),
//!   TXT `path=/`.
//!
//! TXT records of both: `version` (hearth's), `api=openai,anthropic`,
//! `model` (the model served at start), `auth=required`. No key or
//! anything secret is ever advertised.
//!
//! Addresses: a specific `--host` is the only address advertised, and only on
//! its interface; a wildcard (`0.0.0.0`, `::`) advertises every non-loopback
//! address and follows them as interfaces come and go. The instance name is
//! `Hearth on HOSTNAME (PORT)`. The services are unregistered (mDNS
//! "goodbye" packets, so browsers drop them at once) when the server stops.
//!
//! The responder is the `mdns-sd` crate's daemon: one thread of its own, no
//! async runtime. Failing to advertise (no multicast interface, port 5353
//! unavailable) is logged and never stops the server.

use std::{
    net::{IpAddr, SocketAddr},
    time::Duration,
};

use mdns_sd::{IfKind, ServiceDaemon, ServiceInfo};

/// The API's DNS-SD service type.
pub const SERVICE_TYPE: &str = "_hearth._tcp.local.";
/// The web UI's DNS-SD service type (RFC 6763 `_http._tcp`).
pub const HTTP_SERVICE_TYPE: &str = "_http._tcp.local.";

/// What the TXT records say.
#[derive(Debug, Clone)]
pub struct Advertisement {
    /// The address the server is bound to (specific or wildcard).
    pub ip: IpAddr,
    pub port: u16,
    /// The served model's id.
    pub model: String,
}

/// The registered services; unregisters them when stopped or dropped.
pub struct Advertiser {
    daemon: ServiceDaemon,
    fullnames: Vec<String>,
}

/// Advertising could not start.
#[derive(Debug, thiserror::Error)]
#[error("mDNS advertisement failed: {0}")]
pub struct DiscoveryError(#[from] mdns_sd::Error);

impl Advertiser {
    /// Starts the responder and registers both services.
    pub fn start(ad: &Advertisement) -> Result<Advertiser, DiscoveryError> {
        let daemon = ServiceDaemon::new()?;
        let host = local_host_name();
        let instance = format!("Hearth on {host} ({})", ad.port);
        let host_name = format!("{host}.local.");
        let mut fullnames = Vec::new();
        for (service_type, path) in [(SERVICE_TYPE, "/v1"), (HTTP_SERVICE_TYPE, "/")] {
            let txt = txt_records(&ad.model, path);
            let info = if ad.ip.is_unspecified() {
                ServiceInfo::new(service_type, &instance, &host_name, "", ad.port, &txt[..])?
                    .enable_addr_auto()
            } else {
                let mut info = ServiceInfo::new(
                    service_type,
                    &instance,
                    &host_name,
                    ad.ip,
                    ad.port,
                    &txt[..],
                )?;
                info.set_interfaces(vec![IfKind::Addr(ad.ip)]);
                info
            };
            fullnames.push(info.get_fullname().to_string());
            daemon.register(info)?;
        }
        tracing::info!(
            services = ?fullnames,
            host = %host_name,
            "advertising on the LAN (mDNS/DNS-SD)"
        );
        Ok(Advertiser { daemon, fullnames })
    }

    /// Unregisters the services (goodbye packets sent) and stops the
    /// responder; waits at most a second for each.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        for name in self.fullnames.drain(..) {
            if let Ok(done) = self.daemon.unregister(&name) {
                let _ = done.recv_timeout(Duration::from_secs(1));
            }
        }
        if let Ok(done) = self.daemon.shutdown() {
            let _ = done.recv_timeout(Duration::from_secs(1));
        }
        tracing::info!("mDNS advertisement withdrawn");
    }
}

impl Drop for Advertiser {
    fn drop(&mut self) {
        if !self.fullnames.is_empty() {
            self.shutdown();
        }
    }
}

/// The TXT key/value pairs of a service whose URL path is `path`.
pub fn txt_records(model: &str, path: &str) -> Vec<(&'static str, String)> {
    // A TXT string is at most 255 bytes (key=value); model ids are file
    // names, but clip a silly one rather than fail to advertise.
    let mut model = model.to_string();
    while model.len() > 200 {
        model.pop();
    }
    vec![
        ("version", env!("CARGO_PKG_VERSION").to_string()),
        ("path", path.to_string()),
        ("api", "openai,anthropic".to_string()),
        ("model", model),
        ("auth", "required".to_string()),
    ]
}

/// The base URLs (`http://ADDR:PORT/v1`) other machines can use in LAN mode:
/// `HOSTNAME.local` when advertised with mDNS, then the bound address, or
/// every non-loopback, non-link-local address of this machine for a
/// wildcard bind. Empty on loopback.
pub fn lan_base_urls(settings: &super::ServerSettings, local: SocketAddr) -> Vec<String> {
    if settings.is_loopback() {
        return Vec::new();
    }
    let port = local.port();
    let mut urls = Vec::new();
    if settings.mdns {
        urls.push(format!("http://{}.local:{port}/v1", local_host_name()));
    }
    let ips: Vec<IpAddr> = if local.ip().is_unspecified() {
        if_addrs::get_if_addrs()
            .unwrap_or_default()
            .into_iter()
            .filter(|i| !i.is_loopback() && !i.is_link_local())
            .map(|i| i.ip())
            .filter(|ip| local.is_ipv6() || ip.is_ipv4())
            .collect()
    } else {
        vec![local.ip()]
    };
    for ip in ips {
        urls.push(format!("http://{}/v1", SocketAddr::new(ip, port)));
    }
    urls.dedup();
    urls
}

/// This machine's name as a DNS label (`mac` of `mac.local`): the system
/// host name up to its first dot, `hearth` if there is none.
pub fn local_host_name() -> String {
    let name = sysinfo::System::host_name().unwrap_or_default();
    let label: String = name
        .split('.')
        .next()
        .unwrap_or("")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let label = label.trim_matches('-');
    if label.is_empty() {
        "hearth".to_string()
    } else {
        label.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn txt_records_say_where_and_how_to_connect() {
        let txt = txt_records("SmolLM2-135M-Instruct.Q4_1.gguf", "/v1");
        let get = |k: &str| {
            txt.iter()
                .find(|(key, _)| *key == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("path"), Some("/v1"));
        assert_eq!(get("auth"), Some("required"));
        assert_eq!(get("model"), Some("SmolLM2-135M-Instruct.Q4_1.gguf"));
        assert_eq!(get("version"), Some(env!("CARGO_PKG_VERSION")));
        let long = txt_records(&"é".repeat(300), "/");
        let model = long
            .iter()
            .find(|(k, _)| *k == "model")
            .map(|(_, v)| v)
            .unwrap();
        assert!(model.len() <= 200 && model.chars().all(|c| c == 'é'));
    }

    #[test]
    fn host_name_is_a_dns_label() {
        let name = local_host_name();
        assert!(!name.is_empty() && !name.contains('.'));
        assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
    }
}
