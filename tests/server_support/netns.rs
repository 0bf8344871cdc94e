//! A private LAN for a test: a network namespace joined to this one by a
//! veth pair, so a server started inside it (`ip netns exec`) is reached
//! over a real non-loopback interface, with multicast (mDNS) working across
//! the link. Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and iproute2.
//!
//! [`NetNs::create_with_client`] puts the other end in a second namespace
//! instead: a client there has that link and nothing else (no route out, so
//! anything that phones home fails at once), as on an offline LAN.
//!
//! Each namespace gets its own /24 (10.A.B.0/24: `.1` on this side, `.2`
//! inside) and is deleted, with its veth pair, on drop.

use std::{
    net::Ipv4Addr,
    process::Command,
    sync::atomic::{AtomicU32, Ordering},
};

static NEXT: AtomicU32 = AtomicU32::new(0);

pub struct NetNs {
    pub name: String,
    /// This side's address (the test process, "another machine on the LAN").
    pub outside_ip: Ipv4Addr,
    /// The address inside the namespace (where the server binds).
    pub inside_ip: Ipv4Addr,
    /// This side's interface name.
    pub outside_if: String,
    /// The client namespace holding the outside end, if any.
    pub client: Option<String>,
}

/// Whether namespaces can be made here: root, with `ip` available.
pub fn available() -> Result<(), String> {
    let uid = Command::new("id")
        .arg("-u")
        .output()
        .map_err(|e| e.to_string())?;
    if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
        return Err("not root: network namespaces need CAP_SYS_ADMIN".into());
    }
    Command::new("ip")
        .arg("-V")
        .output()
        .map_err(|e| format!("iproute2 `ip` not found: {e}"))?;
    Ok(())
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl NetNs {
    /// Makes the namespace and the link; an error says which step failed.
    pub fn create() -> Result<NetNs, String> {
        Self::make(false)
    }

    /// A server namespace and a client namespace joined only by the veth
    /// link; the client side has `.1`.
    pub fn create_with_client() -> Result<NetNs, String> {
        Self::make(true)
    }

    fn make(with_client: bool) -> Result<NetNs, String> {
        let pid = std::process::id();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("hearth-test-{pid}-{n}");
        // Interface names are at most 15 bytes.
        let tag = format!("{:05}{n}", pid % 100_000);
        let outside_if = format!("hto{tag}");
        let inside_if = format!("hti{tag}");
        let a = 64 + (pid % 128) as u8;
        let b = ((pid / 128 + n * 37) % 250) as u8;
        let outside_ip = Ipv4Addr::new(10, a, b, 1);
        let inside_ip = Ipv4Addr::new(10, a, b, 2);
        ip(&["netns", "add", &name])?;
        let mut ns = NetNs {
            name,
            outside_ip,
            inside_ip,
            outside_if,
            client: None,
        };
        if with_client {
            let client = format!("{}-client", ns.name);
            ip(&["netns", "add", &client])?;
            ns.client = Some(client);
        }
        let outside_cidr = format!("{outside_ip}/24");
        let inside_cidr = format!("{inside_ip}/24");
        ip(&[
            "link",
            "add",
            &ns.outside_if,
            "type",
            "veth",
            "peer",
            "name",
            &inside_if,
        ])?;
        ip(&["link", "set", &inside_if, "netns", &ns.name])?;
        // `ip -n NS` for the client namespace, plain `ip` for this one.
        let outside: Vec<&str> = match &ns.client {
            Some(client) => {
                ip(&["link", "set", &ns.outside_if, "netns", client])?;
                ip(&["-n", client, "link", "set", "lo", "up"])?;
                vec!["-n", client.as_str()]
            }
            None => Vec::new(),
        };
        let ip_outside = |args: &[&str]| {
            let mut all = outside.clone();
            all.extend_from_slice(args);
            ip(&all)
        };
        ip_outside(&["addr", "add", &outside_cidr, "dev", &ns.outside_if])?;
        ip_outside(&["link", "set", &ns.outside_if, "up"])?;
        ip(&[
            "-n",
            &ns.name,
            "addr",
            "add",
            &inside_cidr,
            "dev",
            &inside_if,
        ])?;
        ip(&["-n", &ns.name, "link", "set", &inside_if, "up"])?;
        ip(&["-n", &ns.name, "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// The command prefix that runs a program inside the namespace.
    pub fn exec_prefix(&self) -> Vec<String> {
        vec![
            "ip".into(),
            "netns".into(),
            "exec".into(),
            self.name.clone(),
        ]
    }

    /// A command that runs `program` in the client namespace (this one
    /// without a client namespace).
    pub fn client_command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        match &self.client {
            Some(client) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", client]).arg(program);
                c
            }
            None => Command::new(program),
        }
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        // Deleting the namespace deletes the veth pair with it.
        let _ = ip(&["netns", "del", &self.name]);
        match &self.client {
            Some(client) => {
                let _ = ip(&["netns", "del", client]);
            }
            None => {
                let _ = ip(&["link", "del", &self.outside_if]);
            }
        }
    }
}
