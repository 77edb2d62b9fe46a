//! A URL's hosts, one driver configuration each, in the order to try them (libpq's way of
//! trying several hosts, each under its own `connect_timeout`).

use tokio_postgres::config::{Host, LoadBalanceHosts};
use tokio_postgres::Config;

/// `config` split into one configuration per host, in the order to try them (shuffled for
/// `load_balance_hosts=random`), each keeping every other setting. The driver would try the
/// hosts itself, but under one bound for the whole list; split, each host gets its own.
pub(crate) fn one_per_host(config: &Config) -> Vec<Config> {
    let (hosts, ports, addrs) = (
        config.get_hosts(),
        config.get_ports(),
        config.get_hostaddrs(),
    );
    if hosts.len() <= 1 {
        return vec![config.clone()];
    }
    let mut each: Vec<Config> = (0..hosts.len())
        .map(|i| {
            let mut c = Config::new();
            match &hosts[i] {
                Host::Tcp(name) => c.host(name),
                #[cfg(unix)]
                Host::Unix(path) => c.host_path(path),
            };
            if let Some(port) = ports.get(i).or(ports.first()) {
                c.port(*port);
            }
            if let Some(addr) = addrs.get(i) {
                c.hostaddr(*addr);
            }
            if let Some(v) = config.get_user() {
                c.user(v);
            }
            if let Some(v) = config.get_password() {
                c.password(v);
            }
            if let Some(v) = config.get_dbname() {
                c.dbname(v);
            }
            if let Some(v) = config.get_options() {
                c.options(v);
            }
            if let Some(v) = config.get_application_name() {
                c.application_name(v);
            }
            if let Some(v) = config.get_connect_timeout() {
                c.connect_timeout(*v);
            }
            if let Some(v) = config.get_tcp_user_timeout() {
                c.tcp_user_timeout(*v);
            }
            if let Some(v) = config.get_keepalives_interval() {
                c.keepalives_interval(v);
            }
            if let Some(v) = config.get_keepalives_retries() {
                c.keepalives_retries(v);
            }
            c.ssl_mode(config.get_ssl_mode())
                .ssl_negotiation(config.get_ssl_negotiation())
                .keepalives(config.get_keepalives())
                .keepalives_idle(config.get_keepalives_idle())
                .target_session_attrs(config.get_target_session_attrs())
                .channel_binding(config.get_channel_binding())
                .load_balance_hosts(config.get_load_balance_hosts());
            c
        })
        .collect();
    if config.get_load_balance_hosts() == LoadBalanceHosts::Random {
        for i in (1..each.len()).rev() {
            let j = crate::env::random_u32().map_or(0, |r| r as usize % (i + 1));
            each.swap(i, j);
        }
    }
    each
}

/// `host:port` of a one-host configuration, for messages.
pub(super) fn host_label(config: &Config) -> String {
    let port = config.get_ports().first().copied().unwrap_or(5432);
    match config.get_hosts().first() {
        Some(host) => format!("{}:{port}", host_name(host)),
        None => format!("localhost:{port}"),
    }
}

/// A host as messages name it: its name, or its socket folder. (tokio-postgres has Unix-domain
/// socket hosts on Unix only, hence the `cfg`s here and in [`is_socket`].)
pub(super) fn host_name(host: &Host) -> String {
    match host {
        Host::Tcp(name) => name.clone(),
        #[cfg(unix)]
        Host::Unix(path) => path.display().to_string(),
    }
}

/// A Unix-domain socket host, over which TLS is never used.
pub(super) fn is_socket(host: &Host) -> bool {
    !matches!(host, Host::Tcp(_))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    #[test]
    fn each_host_keeps_every_other_setting_of_the_url() {
        let options = "connect_timeout=7&target_session_attrs=read-write&application_name=x\
                       &sslmode=require&keepalives_idle=40&options=-c%20a%3Db&channel_binding=disable";
        let both =
            Config::from_str(&format!("postgresql://u:pw@h1:5433,h2:5434/db?{options}")).unwrap();
        let split = one_per_host(&both);
        for (i, (host, port)) in [("h1", 5433), ("h2", 5434)].into_iter().enumerate() {
            let alone =
                Config::from_str(&format!("postgresql://u:pw@{host}:{port}/db?{options}")).unwrap();
            assert_eq!(split[i], alone, "{host}");
        }
        // a host without a port gets the default, the next keeps its own
        let mixed = one_per_host(&Config::from_str("postgresql://u@h1,h2:6000/db").unwrap());
        assert_eq!(mixed[0].get_ports(), [5432]);
        assert_eq!(mixed[1].get_ports(), [6000]);
    }
}
