//! The `trellis` binary: `serve` and the operator's admin subcommands.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use trellis::config::{Config, LogFormat};
use trellis::{plugin_workers, wiring};
use trellis_core::audit::Audit;
use trellis_core::auth::{self, KeyKind, NewApiKey, NewUser};
use trellis_core::clock::{FixedClock, SharedClock, SystemClock};
use trellis_core::plugins::service as plugin_service;
use trellis_core::plugins::signatures;
use trellis_core::plugins::Activation;
use trellis_core::SharedContext;
use trellis_http::plugin_dto::{PluginDto, PluginKeyDto, PluginVersionDto, RevocationDto};

/// The service's allocator. Under issuance load glibc's malloc took 11–16 % of the server's
/// samples, a third of it on SQLite's threads freeing what a tokio worker allocated, and it
/// trimmed and regrew its arenas; mimalloc's per-thread pages: 9 % more issuances a second,
/// 3.7 MiB more idle memory (docs/benchmarks.md, issue 24). Its arena is committed on demand (`.cargo/config.toml`).
/// SQLite's own C allocations stay with glibc.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "trellis", version, about = "Trellis certificate lifecycle management")]
struct Cli {
    /// Optional TOML configuration file; TRELLIS_* environment variables override it.
    #[arg(long, global = true, env = "TRELLIS_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the HTTP service.
    Serve,
    /// Manage users.
    User {
        #[command(subcommand)]
        command: UserCommand,
    },
    /// Manage API keys.
    ApiKey {
        #[command(subcommand)]
        command: ApiKeyCommand,
    },
    /// Manage who belongs to a workspace (the API's /api/workspaces/{id}/members); prints JSON.
    Members {
        #[command(subcommand)]
        command: MembersCommand,
    },
    /// Run a background job once, now.
    Jobs {
        #[command(subcommand)]
        command: JobsCommand,
    },
    /// Manage plugins (stored in the database; running servers pick changes up within seconds).
    Plugin {
        #[command(subcommand)]
        command: PluginCommand,
    },
    /// Manage the trust store of plugin publisher keys (TRELLIS_PLUGIN_SIGNATURES); prints JSON.
    PluginKeys {
        #[command(subcommand)]
        command: PluginKeysCommand,
    },
}

#[derive(Subcommand)]
enum PluginKeysCommand {
    /// Trust an ed25519 public key (PEM file) for plugin ids starting with a prefix.
    Add {
        /// Who the key belongs to.
        #[arg(long)]
        name: String,
        /// The public key file (PEM "BEGIN PUBLIC KEY", DER or wasmsign2 raw).
        #[arg(long, value_name = "FILE")]
        public_key: PathBuf,
        /// A plugin id prefix the key may sign (repeat for several), e.g. com.example.
        #[arg(long = "prefix", required = true)]
        prefixes: Vec<String>,
        /// A kind the key may sign (repeat for several); none: every kind.
        #[arg(long = "kind")]
        kinds: Vec<String>,
    },
    /// List the keys, revoked ones included.
    List,
    /// Revoke a key: the versions it signed are deactivated.
    Revoke { key_id: String },
}

#[derive(Subcommand)]
enum PluginCommand {
    /// Install a plugin component (.wasm); prints the installed version as JSON.
    Install {
        file: PathBuf,
        /// Store the version without making it active.
        #[arg(long)]
        no_activate: bool,
        /// A detached wasmsign2 signature of FILE (default: FILE.sig when it exists; an embedded
        /// signature needs none).
        #[arg(long, value_name = "SIG")]
        signature: Option<PathBuf>,
    },
    /// List installed plugins as JSON.
    List,
    /// Install the first-party plugins (what `serve` runs, as a child process, on the very
    /// first start); prints how many were installed.
    #[command(hide = true)]
    InstallFirstParty,
}

#[derive(Subcommand)]
enum JobsCommand {
    /// Emit due certificate.expiring / certificate.expired events; prints {"expiring", "expired"}.
    ExpiryScan {
        /// Scan as if it were this instant (RFC 3339) rather than now. For tests: the events
        /// it emits are real, so a future instant announces expiries that have not happened.
        #[arg(long, hide = true, value_name = "RFC3339")]
        as_of: Option<String>,
    },
    /// Renew due auto-renewing certificates (30 days before expiry); prints {"renewed", "failed",
    /// "pending"}.
    Renew {
        /// Run as if it were this instant (RFC 3339). For tests: the certificates it issues are
        /// real and start at that instant.
        #[arg(long, hide = true, value_name = "RFC3339")]
        as_of: Option<String>,
    },
    /// Poll CAs about pending orders (`issuing` certificate requests) due now; prints {"issued",
    /// "pending", "retrying", "failed"}.
    PollIssuance {
        /// Run as if it were this instant (RFC 3339): requests due by then are polled (tests
        /// skip the wait with it; what the CA answers is real).
        #[arg(long, hide = true, value_name = "RFC3339")]
        as_of: Option<String>,
    },
    /// Deliver pending events to webhooks and integrations: fans out the outbox, then makes every
    /// attempt due now; prints {"events", "delivered", "retrying", "failed"}.
    Deliver {
        /// Run as if it were this instant (RFC 3339): attempts due by then are made (tests walk
        /// the retry schedule with it; the deliveries are real).
        #[arg(long, hide = true, value_name = "RFC3339")]
        as_of: Option<String>,
    },
    /// Probe every CA not health-checked within TRELLIS_CA_HEALTH_INTERVAL_SECS (as POST
    /// /test does: status, healthStatus, ca.health_changed); prints {"checked", "changed"}.
    CaHealth {
        /// Run as if it were this instant (RFC 3339).
        #[arg(long, hide = true, value_name = "RFC3339")]
        as_of: Option<String>,
    },
    /// Run discovery scans nobody is running (pending ones, and running ones whose heartbeat is
    /// older than TRELLIS_DISCOVERY_STALE_SECS: their process stopped); prints {"ran"}.
    Discovery {
        /// Run as if it were this instant (RFC 3339): tests take over a scan of a killed server
        /// with it.
        #[arg(long, hide = true, value_name = "RFC3339")]
        as_of: Option<String>,
    },
}

#[derive(Subcommand)]
enum UserCommand {
    /// Create a user with a new workspace they own; prints {"userId", "workspaceId"}.
    Create {
        #[arg(long)]
        email: String,
        /// Read the password from the first line of standard input.
        #[arg(long, group = "password_source")]
        password_stdin: bool,
        /// Read the password from the first line of a file (e.g. a secret mounted 0600).
        #[arg(long, group = "password_source", value_name = "FILE")]
        password_file: Option<PathBuf>,
        /// The password on the command line: visible in `ps` and shell history, so hidden and
        /// meant for throwaway test setups only.
        #[arg(long, group = "password_source", hide = true)]
        password: Option<String>,
        #[arg(long, default_value = "")]
        first_name: String,
        /// Name of the workspace created for the user.
        #[arg(long, default_value = "default")]
        workspace: String,
        /// Make the user an instance administrator.
        #[arg(long)]
        admin: bool,
    },
}

#[derive(Subcommand)]
enum MembersCommand {
    /// List members and pending invitations: {"members": [...], "invitations": [...]}.
    List {
        /// Workspace id, or its name when that names exactly one workspace.
        #[arg(long)]
        workspace: String,
    },
    /// Add the user with this e-mail, or invite the address when no user has it (redeemed when
    /// such a user is created or signs in); prints {"status": "added"|"invited", ...}.
    Add {
        #[arg(long)]
        workspace: String,
        #[arg(long)]
        email: String,
        #[arg(long, value_parser = ["owner", "member", "viewer"])]
        role: String,
    },
    /// Change a member's role; prints the member.
    SetRole {
        #[arg(long)]
        workspace: String,
        /// The member's user id or e-mail.
        #[arg(long)]
        user: String,
        #[arg(long, value_parser = ["owner", "member", "viewer"])]
        role: String,
    },
    /// Remove a member (their API keys in the workspace are deleted); prints {"removed"}.
    Remove {
        #[arg(long)]
        workspace: String,
        /// The member's user id or e-mail.
        #[arg(long)]
        user: String,
    },
}

#[derive(Subcommand)]
enum ApiKeyCommand {
    /// Create a key in a workspace; prints {"id", "key"}. The key is shown only now.
    Create {
        #[arg(long)]
        workspace: String,
        #[arg(long)]
        name: String,
        /// Comma-separated scopes, e.g. certificates:read,certificates:write.
        #[arg(long, value_delimiter = ',')]
        scopes: Vec<String>,
        #[arg(long, default_value = "client", value_parser = ["client", "agent"])]
        kind: String,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let config = Config::load(cli.config.as_deref()).context("invalid configuration")?;
    init_tracing(config.log_format);
    match cli.command {
        Command::Serve => serve(config, cli.config).await,
        Command::User {
            command:
                UserCommand::Create { email, password_stdin, password_file, password, first_name, workspace, admin },
        } => {
            let password = read_password(password_stdin, password_file, password)?;
            let ctx = open(&config).await?;
            let (user, workspace) = auth::create_user(
                &ctx.auth_deps(),
                NewUser { email, password, first_name, workspace_name: workspace, admin },
            )
            .await
            .context("cannot create the user")?;
            println!("{}", serde_json::json!({ "userId": user.id, "workspaceId": workspace.id }));
            ctx.store.close().await;
            Ok(())
        }
        Command::ApiKey { command: ApiKeyCommand::Create { workspace, name, scopes, kind } } => {
            let ctx = open(&config).await?;
            let kind = KeyKind::parse(&kind).unwrap_or(KeyKind::Client);
            let (key, secret) =
                auth::create_api_key_as_operator(&ctx.auth_deps(), &workspace, NewApiKey { name, scopes, kind })
                    .await
                    .context("cannot create the API key")?;
            println!("{}", serde_json::json!({ "id": key.id, "key": secret }));
            ctx.store.close().await;
            Ok(())
        }
        Command::Members { command } => {
            let ctx = open(&config).await?;
            let result = members_command(&ctx, command).await;
            ctx.store.close().await;
            println!("{}", result?);
            Ok(())
        }
        Command::Plugin { command } => {
            let ctx = open(&config).await?;
            plugin_service::sync(&ctx.plugin_deps()).await.context("loading plugins")?;
            match command {
                PluginCommand::Install { file, no_activate, signature } => {
                    let bytes = std::fs::read(&file).with_context(|| format!("cannot read {}", file.display()))?;
                    let activation = if no_activate { Activation::Never } else { Activation::IfNewer };
                    let signature = match signature {
                        Some(path) => {
                            Some(std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?)
                        }
                        None => plugin_workers::detached_signature_beside(&file).await,
                    };
                    let installed = plugin_service::install_as(
                        &ctx.plugin_deps(),
                        &Audit::system("cli"),
                        None,
                        &bytes,
                        signature.as_deref(),
                        activation,
                    )
                    .await
                    .with_context(|| format!("cannot install {}", file.display()))?;
                    println!("{}", serde_json::to_string(&PluginVersionDto::from(installed))?);
                }
                PluginCommand::List => {
                    let plugins: Vec<PluginDto> = ctx.plugins.host().list().into_iter().map(Into::into).collect();
                    println!("{}", serde_json::to_string(&plugins)?)
                }
                PluginCommand::InstallFirstParty => {
                    let installed =
                        plugin_workers::install_first_party(&ctx, config.first_party_plugin_dir.as_deref()).await;
                    println!("{}", serde_json::json!({ "installed": installed }));
                }
            }
            ctx.store.close().await;
            Ok(())
        }
        Command::PluginKeys { command } => {
            let ctx = open(&config).await?;
            plugin_service::sync(&ctx.plugin_deps()).await.context("loading plugins")?;
            let actor = Audit::system("cli");
            let printed = match command {
                PluginKeysCommand::Add { name, public_key, prefixes, kinds } => {
                    let public_key =
                        std::fs::read(&public_key).with_context(|| format!("cannot read {}", public_key.display()))?;
                    let new = signatures::NewSigningKey { name, public_key, id_prefixes: prefixes, kinds };
                    let key = signatures::add_key_as(&ctx.plugin_deps(), &actor, None, new)
                        .await
                        .context("cannot add the key")?;
                    serde_json::to_string(&PluginKeyDto::from(key))?
                }
                PluginKeysCommand::List => {
                    let keys = ctx.store.list_plugin_signing_keys().await.context("cannot list the keys")?;
                    serde_json::to_string(&keys.into_iter().map(PluginKeyDto::from).collect::<Vec<_>>())?
                }
                PluginKeysCommand::Revoke { key_id } => {
                    let revocation = signatures::revoke_key_as(&ctx.plugin_deps(), &actor, None, &key_id)
                        .await
                        .with_context(|| format!("cannot revoke key {key_id}"))?;
                    serde_json::to_string(&RevocationDto::from(revocation))?
                }
            };
            println!("{printed}");
            ctx.store.close().await;
            Ok(())
        }
        Command::Jobs { command: JobsCommand::ExpiryScan { as_of } } => {
            let ctx = wiring::open(&config, clock_as_of(as_of)?).await.context("cannot start")?;
            let scan =
                trellis_core::certificates::scan_expiry(&ctx.certificate_deps()).await.context("expiry scan failed")?;
            println!("{}", serde_json::json!({ "expiring": scan.expiring, "expired": scan.expired }));
            ctx.store.close().await;
            Ok(())
        }
        Command::Jobs { command: JobsCommand::Deliver { as_of } } => {
            let ctx = wiring::open(&config, clock_as_of(as_of)?).await.context("cannot start")?;
            plugin_service::sync(&ctx.plugin_deps()).await.context("loading plugins")?;
            let owner = ctx.new_id("cli_");
            let run = trellis_core::webhooks::worker::run_due(&ctx.webhook_deps(), &config.delivery, &owner)
                .await
                .context("delivery failed")?;
            println!(
                "{}",
                serde_json::json!({ "events": run.events, "delivered": run.delivered, "retrying": run.retrying, "failed": run.failed })
            );
            ctx.store.close().await;
            Ok(())
        }
        Command::Jobs { command: JobsCommand::CaHealth { as_of } } => {
            let ctx = wiring::open(&config, clock_as_of(as_of)?).await.context("cannot start")?;
            plugin_service::sync(&ctx.plugin_deps()).await.context("loading plugins")?;
            // Off in the server (0) still leaves the job to run by hand: then every CA is due.
            let interval = config.ca_health_interval.unwrap_or(std::time::Duration::ZERO);
            let run = trellis_core::cas::service::check_health(&ctx.ca_deps(), interval)
                .await
                .context("CA health check failed")?;
            println!("{}", serde_json::json!({ "checked": run.checked, "changed": run.changed }));
            ctx.store.close().await;
            Ok(())
        }
        Command::Jobs { command: JobsCommand::Discovery { as_of } } => {
            let ctx = wiring::open(&config, clock_as_of(as_of)?).await.context("cannot start")?;
            plugin_service::sync(&ctx.plugin_deps()).await.context("loading plugins")?;
            let mut ran = 0u64;
            while trellis_core::discovery::claim_and_run(&ctx.discovery_deps(), None)
                .await
                .context("discovery failed")?
            {
                ran += 1;
            }
            println!("{}", serde_json::json!({ "ran": ran }));
            ctx.store.close().await;
            Ok(())
        }
        Command::Jobs { command: JobsCommand::Renew { as_of } } => {
            let ctx = wiring::open(&config, clock_as_of(as_of)?).await.context("cannot start")?;
            plugin_service::sync(&ctx.plugin_deps()).await.context("loading plugins")?;
            let run =
                trellis_core::issuance::renewal::run(&ctx.issuance_deps(), 1000).await.context("renewal failed")?;
            println!("{}", serde_json::json!({ "renewed": run.renewed, "failed": run.failed, "pending": run.pending }));
            ctx.store.close().await;
            Ok(())
        }
        Command::Jobs { command: JobsCommand::PollIssuance { as_of } } => {
            let ctx = wiring::open(&config, clock_as_of(as_of)?).await.context("cannot start")?;
            plugin_service::sync(&ctx.plugin_deps()).await.context("loading plugins")?;
            let owner = ctx.new_id("cli_");
            let mut total = trellis_core::issuance::pending::PollRun::default();
            loop {
                let run = trellis_core::issuance::pending::poll(&ctx.issuance_deps(), &owner, 100)
                    .await
                    .context("polling pending issuances failed")?;
                total.issued += run.issued;
                total.pending += run.pending;
                total.retrying += run.retrying;
                total.failed += run.failed;
                if run.issued + run.pending + run.retrying + run.failed < 100 {
                    break;
                }
            }
            println!("{}", serde_json::to_string(&total)?);
            ctx.store.close().await;
            Ok(())
        }
    }
}

/// The wall clock, or a clock stopped at `as_of` (RFC 3339) for jobs run as of another instant.
fn clock_as_of(as_of: Option<String>) -> anyhow::Result<SharedClock> {
    Ok(match as_of {
        None => Arc::new(SystemClock),
        Some(text) => Arc::new(FixedClock(
            chrono::DateTime::parse_from_rfc3339(&text)
                .with_context(|| format!("--as-of `{text}` is not an RFC 3339 time"))?
                .with_timezone(&chrono::Utc),
        )),
    })
}

/// The new user's password from stdin, a file, or (tests) the command line; never empty.
fn read_password(stdin: bool, file: Option<PathBuf>, inline: Option<String>) -> anyhow::Result<String> {
    let text = if stdin {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).context("cannot read the password from standard input")?;
        line
    } else if let Some(path) = file {
        std::fs::read_to_string(&path).with_context(|| format!("cannot read the password file {}", path.display()))?
    } else if let Some(inline) = inline {
        inline
    } else {
        anyhow::bail!("give the password with --password-stdin or --password-file FILE");
    };
    let password = text.lines().next().unwrap_or_default().to_string();
    anyhow::ensure!(!password.is_empty(), "the password is empty");
    Ok(password)
}

/// Logs go to stderr so that subcommands can print JSON on stdout.
fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,sqlx=warn"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(true).init(),
        LogFormat::Pretty => builder.init(),
    }
}

async fn open(config: &Config) -> anyhow::Result<SharedContext> {
    wiring::open(config, Arc::new(SystemClock)).await.context("cannot start")
}

async fn serve(config: Config, config_file: Option<PathBuf>) -> anyhow::Result<()> {
    tracing::info!(config = ?config, "starting trellis");
    trellis_http::ops::install_metrics();
    let listen = config.listen;
    let service = wiring::open_service(&config, Arc::new(SystemClock)).await.context("cannot start")?;
    let ctx = service.ctx;
    if let Some(user) = auth::bootstrap_admin(&ctx.auth_deps()).await.context("cannot create the admin user")? {
        tracing::info!(user_id = %user.id, email = %user.email, "created the instance administrator");
    }
    plugin_workers::load(&ctx, config_file.as_deref(), config.first_party_plugin_dir.as_deref())
        .await
        .context("cannot load plugins")?;
    plugin_workers::spawn_sync(ctx.clone(), std::time::Duration::from_secs(5));
    if let Some(dir) = config.plugin_dir.clone() {
        tracing::info!(dir = %dir.display(), "watching plugin directory");
        plugin_workers::spawn_directory_watcher(ctx.clone(), dir, std::time::Duration::from_secs(2));
    }
    let expiry_scanner = trellis::jobs::spawn_expiry_scanner(ctx.clone(), config.expiry_scan_interval);
    let renewal = trellis::jobs::spawn_renewal(ctx.clone(), config.renewal_interval);
    let ledger_backlog = trellis::jobs::spawn_pki_ledger_backlog(ctx.clone(), std::time::Duration::from_secs(5));
    // The task is detached on purpose: a validation it runs records its outcome or nothing.
    let _acme_validation = trellis::jobs::spawn_acme_validation(ctx.clone(), std::time::Duration::from_secs(30));
    let issuance_poller =
        trellis::jobs::spawn_issuance_poller(ctx.clone(), config.issuance_poll_interval, ctx.new_id("poller_"));
    let discovery = trellis::jobs::spawn_discovery(ctx.clone(), std::time::Duration::from_secs(60));
    let ca_health = config.ca_health_interval.map(|interval| trellis::jobs::spawn_ca_health(ctx.clone(), interval));
    let deliveries = config.delivery_worker.then(|| {
        trellis_core::webhooks::worker::DeliveryWorker::new(ctx.webhook_deps(), config.delivery.clone()).spawn()
    });
    let outbox_retention = trellis::jobs::spawn_outbox_retention(
        ctx.clone(),
        std::time::Duration::from_secs(3600),
        config.outbox_retention,
    );
    let challenge_listener = match (config.acme_http01_listen, service.http01_answers) {
        (Some(address), Some(answers)) => {
            let purge = trellis::jobs::spawn_challenge_purge(
                answers.clone(),
                ctx.clock.clone(),
                std::time::Duration::from_secs(600),
            );
            let router = trellis_http::acme_challenges::router(answers, ctx.clock.clone());
            let listener = tokio::net::TcpListener::bind(address)
                .await
                .with_context(|| format!("cannot listen for ACME HTTP-01 challenges on {address}"))?;
            tracing::info!(address = %listener.local_addr()?, "serving ACME HTTP-01 challenges");
            let listener = trellis_http::listener::LimitedListener::new(listener, config.max_connections);
            let server = tokio::spawn(async move {
                if let Err(err) = axum::serve(listener, router).await {
                    tracing::error!(error = %err, "the ACME HTTP-01 listener stopped");
                }
            });
            Some((server, purge))
        }
        _ => None,
    };
    let metrics_listener = match config.metrics_listen {
        Some(address) => {
            let listener = tokio::net::TcpListener::bind(address)
                .await
                .with_context(|| format!("cannot listen for metrics on {address}"))?;
            tracing::info!(address = %listener.local_addr()?, "serving /metrics");
            let listener = trellis_http::listener::LimitedListener::new(listener, config.max_connections);
            Some(tokio::spawn(async move {
                if let Err(err) = axum::serve(listener, trellis_http::ops::metrics_router()).await {
                    tracing::error!(error = %err, "the metrics listener stopped");
                }
            }))
        }
        None => None,
    };
    // The web console (`/`, `/login`, …) shares the API's layers and session.
    let app = trellis_http::router_with(ctx.clone(), wiring::http_settings(&config), trellis_console::routes());
    let listener = tokio::net::TcpListener::bind(listen).await.with_context(|| format!("cannot listen on {listen}"))?;
    tracing::info!(address = %listener.local_addr()?, "listening");
    let listener = trellis_http::listener::LimitedListener::new(listener, config.max_connections);
    axum::serve(listener, app.into_make_service_with_connect_info::<trellis_http::listener::PeerAddr>())
        .with_graceful_shutdown(shutdown_signal())
        .await?;
    expiry_scanner.abort();
    renewal.abort();
    issuance_poller.abort();
    discovery.abort();
    if let Some(ca_health) = ca_health {
        ca_health.abort();
    }
    outbox_retention.abort();
    if let Some(ledger_backlog) = ledger_backlog {
        ledger_backlog.abort();
    }
    // Requests that went away after a signature left ledger rows: keep them before stopping.
    if let Some(pki) = &ctx.pki {
        if let Err(err) = pki.record_ledger_backlog().await {
            tracing::error!(error = %err, "recording the internal PKI's ledger backlog at shutdown failed");
        }
    }
    if let Some(metrics) = metrics_listener {
        metrics.abort();
    }
    if let Some(deliveries) = deliveries {
        deliveries.abort();
    }
    if let Some((server, purge)) = challenge_listener {
        server.abort();
        purge.abort();
    }
    ctx.store.close().await;
    tracing::info!("stopped");
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = terminate => {},
    }
    tracing::info!("shutdown signal received; finishing in-flight requests");
}

fn member_json(member: auth::Member) -> serde_json::Value {
    serde_json::json!({
        "userId": member.user_id,
        "email": member.email,
        "firstName": member.first_name,
        "role": member.role.as_str(),
        "joinedAt": trellis_core::clock::rfc3339(member.joined_at),
    })
}

fn invitation_json(invitation: auth::Invitation) -> serde_json::Value {
    serde_json::json!({
        "id": invitation.id,
        "workspaceId": invitation.workspace_id,
        "email": invitation.email,
        "role": invitation.role.as_str(),
        "invitedBy": invitation.invited_by,
        "createdAt": trellis_core::clock::rfc3339(invitation.created_at),
        "expiresAt": trellis_core::clock::rfc3339(invitation.expires_at),
    })
}

/// `trellis members …`: the operator acts through the same domain functions as the API, with
/// every scope, audited as `system`/`cli`.
async fn members_command(ctx: &SharedContext, command: MembersCommand) -> anyhow::Result<serde_json::Value> {
    use trellis_core::auth::members;
    use trellis_core::pagination::PageRequest;
    match command {
        MembersCommand::List { workspace } => {
            let operator = members::operator_in(&ctx.auth_deps(), &workspace).await.context("unknown workspace")?;
            let (mut all_members, mut all_invitations) = (Vec::new(), Vec::new());
            for page in 1.. {
                let window = PageRequest::new(Some(page), Some(100), None, 100)?;
                let found = members::list_members(&ctx.auth_deps(), &operator, window).await?;
                let done = found.items.len() < 100;
                all_members.extend(found.items.into_iter().map(member_json));
                if done {
                    break;
                }
            }
            for page in 1.. {
                let window = PageRequest::new(Some(page), Some(100), None, 100)?;
                let found = members::list_invitations(&ctx.auth_deps(), &operator, window).await?;
                let done = found.items.len() < 100;
                all_invitations.extend(found.items.into_iter().map(invitation_json));
                if done {
                    break;
                }
            }
            Ok(serde_json::json!({ "members": all_members, "invitations": all_invitations }))
        }
        MembersCommand::Add { workspace, email, role } => {
            let operator = members::operator_in(&ctx.auth_deps(), &workspace).await.context("unknown workspace")?;
            Ok(
                match members::add(&ctx.auth_deps(), &operator, &email, &role).await.context("cannot add the member")? {
                    members::Added::Member(member) => {
                        serde_json::json!({ "status": "added", "member": member_json(member) })
                    }
                    members::Added::Invitation(invitation) => {
                        serde_json::json!({ "status": "invited", "invitation": invitation_json(invitation) })
                    }
                },
            )
        }
        MembersCommand::SetRole { workspace, user, role } => {
            let operator = members::operator_in(&ctx.auth_deps(), &workspace).await.context("unknown workspace")?;
            let user_id = members::user_id_of(&ctx.auth_deps(), &user).await.context("unknown user")?;
            let member = members::set_role(&ctx.auth_deps(), &operator, &user_id, &role)
                .await
                .context("cannot change the role")?;
            Ok(member_json(member))
        }
        MembersCommand::Remove { workspace, user } => {
            let operator = members::operator_in(&ctx.auth_deps(), &workspace).await.context("unknown workspace")?;
            let user_id = members::user_id_of(&ctx.auth_deps(), &user).await.context("unknown user")?;
            members::remove(&ctx.auth_deps(), &operator, &user_id).await.context("cannot remove the member")?;
            Ok(serde_json::json!({ "removed": user_id }))
        }
    }
}
