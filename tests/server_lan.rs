//! LAN mode end to end: `hearth serve` inside a network namespace (a
//! "machine" on a veth link), seen from this side as another machine of the
//! LAN would see it: found by mDNS/DNS-SD (src/server/discovery.rs), then
//! reached at the advertised address with the API key.

mod server_support;

use std::time::{Duration, Instant};

use mdns_sd::{ResolvedService, ServiceDaemon, ServiceEvent};
use server_support::{netns::NetNs, *};

/// A namespace, or `None` (test skipped, with the reason printed) where
/// this sandbox cannot make one without root.
fn lan() -> Option<NetNs> {
    if let Err(why) = netns::available() {
        eprintln!("SKIPPED: no network namespace for a LAN test: {why}");
        return None;
    }
    Some(NetNs::create().unwrap_or_else(|e| panic!("cannot make a test LAN as root: {e}")))
}

/// Waits for the instance of `service_type` on `port` to resolve.
fn resolve(
    events: &mdns_sd::Receiver<ServiceEvent>,
    port: u16,
    timeout: Duration,
) -> Box<ResolvedService> {
    let deadline = Instant::now() + timeout;
    let mut seen = Vec::new();
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match events.recv_timeout(left) {
            Ok(ServiceEvent::ServiceResolved(service)) if service.get_port() == port => {
                return service
            }
            Ok(event) => seen.push(format!("{event:?}")),
            Err(_) => break,
        }
    }
    panic!("no service on port {port} resolved in {timeout:?}; events: {seen:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lan_server_is_found_by_mdns_and_withdrawn_on_shutdown() {
    let Some(ns) = lan() else { return };
    // The browser runs on this side of the link, like an agent's machine.
    let browser = ServiceDaemon::new().expect("mDNS browser");
    let api_events = browser.browse("_hearth._tcp.local.").expect("browse");
    let ui_events = browser.browse("_http._tcp.local.").expect("browse");

    let mut server = TestServer::start_in_netns(&ns, &smollm2(), &["--api-key", "lan-key"]);
    let port = server.addr.port();
    assert_eq!(server.addr.ip(), std::net::IpAddr::V4(ns.inside_ip));

    let api = resolve(&api_events, port, Duration::from_secs(20));
    let addresses = api.get_addresses_v4();
    assert!(
        addresses.contains(&ns.inside_ip),
        "advertised {addresses:?}, bound {}",
        ns.inside_ip
    );
    assert!(
        !addresses.iter().any(|a| a.is_loopback()),
        "loopback advertised: {addresses:?}"
    );
    assert!(
        api.get_hostname().ends_with(".local."),
        "{}",
        api.get_hostname()
    );
    assert!(
        api.get_fullname().starts_with("Hearth on "),
        "{}",
        api.get_fullname()
    );
    assert_eq!(api.get_property_val_str("path"), Some("/v1"));
    assert_eq!(api.get_property_val_str("auth"), Some("required"));
    assert_eq!(
        api.get_property_val_str("model"),
        Some("SmolLM2-135M-Instruct.Q4_1.gguf")
    );
    assert_eq!(
        api.get_property_val_str("version"),
        Some(env!("CARGO_PKG_VERSION"))
    );
    let ui = resolve(&ui_events, port, Duration::from_secs(20));
    assert_eq!(ui.get_property_val_str("path"), Some("/"));

    // The advertised address and path answer, with the key only.
    let base = format!(
        "http://{}:{}{}",
        ns.inside_ip,
        api.get_port(),
        api.get_property_val_str("path").unwrap_or_default()
    );
    let unauthorized = client()
        .get(format!("{base}/models"))
        .send()
        .await
        .expect("request");
    assert_eq!(unauthorized.status().as_u16(), 401);
    let models: serde_json::Value = client()
        .get(format!("{base}/models"))
        .bearer_auth("lan-key")
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("JSON");
    assert_eq!(models["data"][0]["id"], "SmolLM2-135M-Instruct.Q4_1.gguf");
    // The web UI's "Connect an agent" card gets the LAN base URLs.
    let status: serde_json::Value = client()
        .get(format!("http://{}:{port}/api/status", ns.inside_ip))
        .bearer_auth("lan-key")
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("JSON");
    let lan = status["lan_endpoints"].as_array().expect("lan_endpoints");
    assert!(
        lan[0]
            .as_str()
            .is_some_and(|u| u.ends_with(&format!(".local:{port}/v1"))),
        "{lan:?}"
    );
    assert!(
        lan.contains(&serde_json::json!(base)),
        "{lan:?} lacks {base}"
    );

    // Shutdown says goodbye: the browser drops the instance at once.
    let fullname = api.get_fullname().to_string();
    server.signal("TERM");
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut removed = false;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match api_events.recv_timeout(left) {
            Ok(ServiceEvent::ServiceRemoved(_, name)) if name == fullname => {
                removed = true;
                break;
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    assert!(removed, "{fullname} was not withdrawn on shutdown");
    let status = server.wait_exit(Duration::from_secs(30)).expect("exit");
    assert!(status.success(), "{status:?}");
    assert!(server.log_text().contains("mDNS advertisement withdrawn"));
    let _ = browser.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_mdns_flag_keeps_a_lan_server_quiet() {
    let Some(ns) = lan() else { return };
    let browser = ServiceDaemon::new().expect("mDNS browser");
    let events = browser.browse("_hearth._tcp.local.").expect("browse");
    let server =
        TestServer::start_in_netns(&ns, &smollm2(), &["--api-key", "lan-key", "--no-mdns"]);
    let port = server.addr.port();
    // The advertised case resolves within a second or two; give it 5.
    let deadline = Instant::now() + Duration::from_secs(5);
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        if let Ok(ServiceEvent::ServiceResolved(service)) = events.recv_timeout(left) {
            assert_ne!(service.get_port(), port, "advertised despite --no-mdns");
        }
    }
    assert!(!server.log_text().contains("advertising on the LAN"));
    let _ = browser.shutdown();
}
