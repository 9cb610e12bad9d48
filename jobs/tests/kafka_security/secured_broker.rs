//! A tansu broker of one test's own, secured the way the test asks: SCRAM users and
//! `--authentication` (SASL), and TLS with a CA and broker certificate the test makes.
//!
//! tansu 0.6 takes users only from a broker that does not require authentication yet
//! (`tansu user create` has no credentials of its own), so the broker is started open, the
//! users and topics are created, and it is restarted on the same data with `--authentication`.
//! TLS: tansu 0.6's CLI puts `--cert` and `--key` in one clap group, so it refuses the two
//! together and cannot serve TLS; the test terminates TLS in front of it instead, in a
//! listener on its own port that tansu advertises as the broker's address, so every client
//! connection (bootstrap and metadata-advertised) goes through TLS. The broker is killed and
//! the listener stopped on drop. Needs tansu installed by `scripts/setup.sh` (no skip: a
//! missing binary fails the test).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use openssl::asn1::Asn1Time;
use openssl::bn::{BigNum, MsbOption};
use openssl::ec::{EcGroup, EcKey};
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::{PKey, Private};
use openssl::ssl::{Ssl, SslAcceptor, SslMethod};
use openssl::x509::extension::{
    BasicConstraints, ExtendedKeyUsage, KeyUsage, SubjectAlternativeName,
};
use openssl::x509::{X509Name, X509};

/// A SCRAM user the broker knows.
pub struct User<'a> {
    /// `scram256` or `scram512` (tansu's names for SCRAM-SHA-256 and -512).
    pub mechanism: &'a str,
    /// User name.
    pub name: &'a str,
    /// Password.
    pub password: &'a str,
}

/// What the broker requires of its clients.
pub struct Security<'a> {
    /// Users created before the broker starts requiring authentication; none: no
    /// authentication.
    pub users: &'a [User<'a>],
    /// Serve TLS with a certificate signed by the test's own CA.
    pub tls: bool,
    /// Topics (name, partitions) created while the broker is still open.
    pub topics: &'a [(&'a str, i32)],
}

/// A running broker; the broker is killed and the TLS listener stopped on drop.
pub struct SecuredBroker {
    tansu: Child,
    /// The TLS listener's runtime (its tasks stop when it is dropped).
    _tls: Option<tokio::runtime::Runtime>,
    /// `host:port` clients connect to (the TLS listener when there is one).
    pub address: String,
    /// The CA certificate (PEM) that signed the broker's certificate, when TLS is on.
    pub ca: Option<PathBuf>,
}

impl SecuredBroker {
    /// Starts tansu with its data in `dir`, secured as `security` says.
    pub fn start(dir: &Path, security: &Security) -> Result<SecuredBroker> {
        fs::create_dir_all(dir)?;
        // Two distinct ports when TLS needs its own listener.
        let ports = weir_ports::free_local_ports(if security.tls { 2 } else { 1 })?;
        let plain_port = ports[0];
        let client_port = *ports.last().unwrap_or(&plain_port);
        let plain = format!("tcp://127.0.0.1:{plain_port}");
        let advertised = format!("tcp://127.0.0.1:{client_port}");
        let mut tansu = spawn_tansu(dir, &plain, &advertised, false)?;
        let open = (|| {
            wait_listening(plain_port, &mut tansu, dir)?;
            for (topic, partitions) in security.topics {
                let partitions = partitions.to_string();
                tansu_cli(
                    dir,
                    &[
                        "topic",
                        "create",
                        "--broker",
                        &plain,
                        "--partitions",
                        &partitions,
                        topic,
                    ],
                )?;
            }
            for user in security.users {
                tansu_cli(
                    dir,
                    &[
                        "user",
                        "create",
                        "--broker",
                        &plain,
                        "--mechanism",
                        user.mechanism,
                        user.name,
                        user.password,
                    ],
                )?;
            }
            Ok(())
        })();
        if let Err(error) = open.and_then(|()| {
            if security.users.is_empty() {
                return Ok(());
            }
            // Restart on the same data, now requiring authentication.
            stop(&mut tansu);
            tansu = spawn_tansu(dir, &plain, &advertised, true)?;
            wait_listening(plain_port, &mut tansu, dir)
        }) {
            stop(&mut tansu);
            return Err(error);
        }
        let mut broker = SecuredBroker {
            tansu,
            _tls: None,
            address: format!("127.0.0.1:{client_port}"),
            ca: None,
        };
        if security.tls {
            let files = make_certificates(dir)?;
            broker._tls = Some(tls_listener(&files, client_port, plain_port)?);
            broker.ca = Some(files.ca);
        }
        Ok(broker)
    }
}

impl Drop for SecuredBroker {
    fn drop(&mut self) {
        stop(&mut self.tansu);
    }
}

fn stop(tansu: &mut Child) {
    let _ = tansu.kill();
    let _ = tansu.wait();
}

/// The tansu binary: `WEIR_TANSU_BIN`, or where `scripts/setup.sh` installs it.
fn tansu_bin() -> Result<PathBuf> {
    let bin = std::env::var_os("WEIR_TANSU_BIN").map_or_else(
        || {
            let home = std::env::var_os("HOME").unwrap_or_default();
            PathBuf::from(home).join(".cache/weir/tansu-0.6.0/bin/tansu")
        },
        PathBuf::from,
    );
    ensure!(
        bin.is_file(),
        "tansu not found at {} (scripts/setup.sh installs it; WEIR_TANSU_BIN points elsewhere)",
        bin.display()
    );
    Ok(bin)
}

/// A tansu command run in `dir` with a clean environment for the settings tansu also reads
/// from the environment.
fn tansu_command(dir: &Path) -> Result<Command> {
    let mut command = Command::new(tansu_bin()?);
    command
        .current_dir(dir)
        .env_remove("LISTENER_URL")
        .env_remove("ADVERTISED_LISTENER_URL")
        .env_remove("STORAGE_ENGINE")
        .env_remove("CLUSTER_ID")
        .env_remove("SCHEMA_REGISTRY")
        .env("NO_COLOR", "1");
    Ok(command)
}

fn spawn_tansu(
    dir: &Path,
    listener: &str,
    advertised: &str,
    authentication: bool,
) -> Result<Child> {
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("tansu.log"))?;
    let mut command = tansu_command(dir)?;
    command
        .arg("broker")
        .args(["--cluster-id", "weir-secured"])
        .args(["--listener-url", listener])
        .args(["--advertised-listener-url", advertised])
        .args(["--storage-engine", "sqlite://tansu.db"]);
    if authentication {
        command.arg("--authentication");
    }
    command
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .context("cannot start tansu")
}

fn wait_listening(port: u16, tansu: &mut Child, dir: &Path) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        ensure!(
            tansu.try_wait()?.is_none(),
            "tansu exited at start: {}",
            dir.join("tansu.log").display()
        );
        ensure!(Instant::now() < deadline, "tansu did not listen on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

fn tansu_cli(dir: &Path, args: &[&str]) -> Result<()> {
    let output = tansu_command(dir)?
        .args(args)
        .output()
        .with_context(|| format!("cannot run tansu {}", args.join(" ")))?;
    ensure!(
        output.status.success(),
        "tansu {} failed ({}): {}",
        args[..2].join(" "),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

/// PEM files of the test's CA and of the broker's certificate and key.
struct CertificateFiles {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

/// A fresh CA and a broker certificate it signs for `127.0.0.1` and `localhost`, valid from a
/// day ago for two days, written to `dir`.
fn make_certificates(dir: &Path) -> Result<CertificateFiles> {
    let ca_key = ec_key()?;
    let ca_name = name("weir test CA")?;
    let mut ca = certificate_builder(&ca_name, &ca_key)?;
    ca.set_issuer_name(&ca_name)?;
    ca.append_extension(BasicConstraints::new().critical().ca().build()?)?;
    ca.append_extension(
        KeyUsage::new()
            .critical()
            .key_cert_sign()
            .crl_sign()
            .build()?,
    )?;
    ca.sign(&ca_key, MessageDigest::sha256())?;
    let ca = ca.build();

    let key = ec_key()?;
    let mut cert = certificate_builder(&name("127.0.0.1")?, &key)?;
    cert.set_issuer_name(ca.subject_name())?;
    cert.append_extension(BasicConstraints::new().build()?)?;
    cert.append_extension(
        KeyUsage::new()
            .critical()
            .digital_signature()
            .key_agreement()
            .build()?,
    )?;
    cert.append_extension(ExtendedKeyUsage::new().server_auth().build()?)?;
    let san = SubjectAlternativeName::new()
        .ip("127.0.0.1")
        .dns("localhost")
        .build(&cert.x509v3_context(Some(&ca), None))?;
    cert.append_extension(san)?;
    cert.sign(&ca_key, MessageDigest::sha256())?;
    let cert = cert.build();

    let files = CertificateFiles {
        ca: dir.join("ca.pem"),
        cert: dir.join("broker.pem"),
        key: dir.join("broker.key"),
    };
    fs::write(&files.ca, ca.to_pem()?)?;
    fs::write(&files.cert, cert.to_pem()?)?;
    fs::write(&files.key, key.private_key_to_pem_pkcs8()?)?;
    Ok(files)
}

fn ec_key() -> Result<PKey<Private>> {
    let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1)?;
    Ok(PKey::from_ec_key(EcKey::generate(&group)?)?)
}

fn name(common_name: &str) -> Result<X509Name> {
    let mut name = X509Name::builder()?;
    name.append_entry_by_nid(Nid::COMMONNAME, common_name)?;
    Ok(name.build())
}

fn certificate_builder(
    subject: &X509Name,
    key: &PKey<Private>,
) -> Result<openssl::x509::X509Builder> {
    let mut builder = X509::builder()?;
    builder.set_version(2)?;
    let mut serial = BigNum::new()?;
    serial.rand(64, MsbOption::MAYBE_ZERO, false)?;
    let serial = serial.to_asn1_integer()?;
    builder.set_serial_number(&serial)?;
    builder.set_subject_name(subject)?;
    builder.set_pubkey(key)?;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?;
    let day = 86_400;
    let (not_before, not_after) = (
        Asn1Time::from_unix(now.as_secs() as i64 - day)?,
        Asn1Time::from_unix(now.as_secs() as i64 + 2 * day)?,
    );
    builder.set_not_before(&not_before)?;
    builder.set_not_after(&not_after)?;
    Ok(builder)
}

/// Accepts TLS on `port` with the broker's certificate and relays each connection's bytes to
/// tansu's plain listener on `upstream`, until the returned runtime is dropped.
fn tls_listener(
    files: &CertificateFiles,
    port: u16,
    upstream: u16,
) -> Result<tokio::runtime::Runtime> {
    let mut acceptor = SslAcceptor::mozilla_intermediate_v5(SslMethod::tls_server())?;
    acceptor.set_private_key_file(&files.key, openssl::ssl::SslFiletype::PEM)?;
    acceptor.set_certificate_chain_file(&files.cert)?;
    acceptor.check_private_key()?;
    let acceptor = Arc::new(acceptor.build());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_io()
        .build()?;
    let listener = runtime.block_on(tokio::net::TcpListener::bind(("127.0.0.1", port)))?;
    runtime.spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let acceptor = Arc::clone(&acceptor);
            tokio::spawn(async move {
                // A client that fails the handshake (one without the CA) is simply dropped,
                // as a TLS broker would.
                let Ok(ssl) = Ssl::new(acceptor.context()) else {
                    return;
                };
                let Ok(mut tls) = tokio_openssl::SslStream::new(ssl, client) else {
                    return;
                };
                if Pin::new(&mut tls).accept().await.is_err() {
                    return;
                }
                let Ok(mut broker) = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await
                else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut broker).await;
            });
        }
    });
    Ok(runtime)
}

/// librdkafka properties for a client of `broker`: its address, then `security`.
pub fn client_properties(
    broker: &SecuredBroker,
    security: &[(&str, &str)],
) -> BTreeMap<String, String> {
    std::iter::once(("bootstrap.servers".to_owned(), broker.address.clone()))
        .chain(
            security
                .iter()
                .map(|(key, value)| ((*key).to_owned(), (*value).to_owned())),
        )
        .collect()
}
