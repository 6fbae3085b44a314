//! The AWS emulator: one moto server per test binary (or a dedicated one), its request log.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::{http, workspace_root};

/// A running moto server, shared by every test in this test binary.
pub struct Moto {
    endpoint: String,
    port: u16,
    /// The file moto's request recorder appends to.
    recording: PathBuf,
    // Held, never read: while this process lives, the pipe stays open and moto keeps running.
    // When the process exits the pipe closes and `scripts/moto_guard.py` stops the server.
    _guard: Mutex<(Child, ChildStdin)>,
}

impl Moto {
    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The region tests use against the emulator.
    pub const REGION: &'static str = "us-east-1";

    /// Turns IAM enforcement on from the next request (moto's `reset-auth` with no free
    /// actions): every request must then be signed by a principal whose policies allow it. For a
    /// [`dedicated_moto`] only: it is server-wide.
    pub fn enforce_iam(&self) {
        use std::io::{Read, Write};
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).expect("connect to moto");
        write!(
            stream,
            "POST /moto-api/reset-auth HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: text/plain\r\nContent-Length: 1\r\nConnection: close\r\n\r\n0",
            self.port
        )
        .expect("send the request");
        let mut response = String::new();
        stream
            .read_to_string(&mut response)
            .expect("read the response");
        assert!(
            response.starts_with("HTTP/1.1 200"),
            "turning IAM enforcement on failed: {response}"
        );
    }

    /// Creates an S3 bucket (moto accepts unsigned requests while IAM enforcement is off).
    pub fn create_bucket(&self, bucket: &str) {
        let response = http(self.port, "PUT", &format!("/{bucket}"));
        assert!(
            response.starts_with("HTTP/1.1 200"),
            "creating bucket {bucket} failed: {response}"
        );
    }
}

/// The emulator's request log (moto's recorder), one JSON object per request. The recorder is
/// global to the server: while it runs it logs every test's requests, so tests filter the log by
/// something only they use (e.g. an access key id), and one recording runs at a time.
impl Moto {
    pub fn start_recording(&'static self) -> Recording {
        static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
        let guard = ONE_AT_A_TIME
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for action in ["reset-recording", "start-recording"] {
            let response = http(self.port, "POST", &format!("/moto-api/recorder/{action}"));
            assert!(response.starts_with("HTTP/1.1 200"), "{action}: {response}");
        }
        Recording {
            moto: self,
            _one_at_a_time: guard,
        }
    }
}

/// A running recording; [`Recording::stop`] returns what it logged.
pub struct Recording {
    moto: &'static Moto,
    _one_at_a_time: std::sync::MutexGuard<'static, ()>,
}

impl Recording {
    pub fn stop(self) -> Vec<serde_json::Value> {
        let port = self.moto.port;
        let response = http(port, "POST", "/moto-api/recorder/stop-recording");
        assert!(response.starts_with("HTTP/1.1 200"), "stop: {response}");
        let log = std::fs::read_to_string(&self.moto.recording).unwrap_or_else(|e| {
            panic!(
                "cannot read moto's recording {}: {e}",
                self.moto.recording.display()
            )
        });
        // Other tests' requests still in flight may leave a half-written last line; the
        // recording test's own processes have finished by now, so their records are whole.
        log.lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

/// One recorded AWS request: the service, the action and what it acted on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwsRequest {
    /// `dynamodb`, `iam`, `sts` or `s3`.
    pub service: String,
    /// The API action (`PutItem`, `PutRolePolicy`, …); for S3 the HTTP method.
    pub action: String,
    /// The table, the role (with the policy name), or the S3 URL.
    pub resource: String,
    /// The request's body (a DynamoDB request's JSON, say).
    pub body: Vec<u8>,
}

impl AwsRequest {
    /// Whether the request only reads (Describe*, Get*, List*, Query, Scan; S3 GET/HEAD).
    pub fn is_read(&self) -> bool {
        ["Describe", "Get", "List", "Query", "Scan", "GET", "HEAD"]
            .iter()
            .any(|p| self.action.starts_with(p))
    }
}

/// The requests in `log` signed with `access_key`.
pub fn requests_signed_by(log: &[serde_json::Value], access_key: &str) -> Vec<AwsRequest> {
    use base64::Engine as _;
    let credential = format!("Credential={access_key}/");
    log.iter()
        .filter_map(|entry| {
            let headers = entry["headers"].as_object()?;
            let header = |name: &str| {
                headers
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(name))
                    .and_then(|(_, v)| v.as_str())
                    .unwrap_or_default()
                    .to_owned()
            };
            let auth = header("authorization");
            if !auth.contains(&credential) {
                return None;
            }
            let service = auth
                .split("Credential=")
                .nth(1)
                .and_then(|c| c.split('/').nth(3))
                .unwrap_or_default()
                .to_owned();
            let raw = entry["body"].as_str().unwrap_or_default();
            let body = if entry["body_encoded"].as_bool() == Some(true) {
                base64::engine::general_purpose::STANDARD
                    .decode(raw)
                    .unwrap_or_default()
            } else {
                raw.as_bytes().to_vec()
            };
            let (action, resource) = match service.as_str() {
                "dynamodb" => {
                    let target = header("x-amz-target");
                    let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                    (
                        target.rsplit('.').next().unwrap_or_default().to_owned(),
                        json["TableName"].as_str().unwrap_or_default().to_owned(),
                    )
                }
                "s3" => (
                    entry["method"].as_str().unwrap_or_default().to_owned(),
                    entry["url"].as_str().unwrap_or_default().to_owned(),
                ),
                _ => {
                    // Query-protocol services (IAM, STS): a form-encoded body.
                    let form: std::collections::HashMap<String, String> =
                        url::form_urlencoded::parse(&body).into_owned().collect();
                    let resource = [form.get("RoleName"), form.get("PolicyName")]
                        .into_iter()
                        .flatten()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join("/");
                    (form.get("Action").cloned().unwrap_or_default(), resource)
                }
            };
            Some(AwsRequest {
                service,
                action,
                resource,
                body,
            })
        })
        .collect()
}

static MOTO: OnceLock<Moto> = OnceLock::new();

/// The test binary's moto server, started on first use on a free loopback port. Panics (failing
/// the test loudly) if it cannot start.
pub fn moto() -> &'static Moto {
    MOTO.get_or_init(start_moto)
}

/// A moto server of the caller's own (for tests that change server-wide settings such as IAM
/// enforcement); stopped when dropped.
pub fn dedicated_moto() -> Moto {
    start_moto()
}

fn start_moto() -> Moto {
    let script = workspace_root().join("scripts/moto_guard.py");
    let mut child = crate::python_command()
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start the moto server ({}): {e}", script.display()));
    let stdin = child.stdin.take().expect("stdin is piped");
    let stdout = child.stdout.take().expect("stdout is piped");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("read moto's port");
    // "PORT <n> RECORDING <path>"
    let mut words = line.split_whitespace();
    let (port, recording) = match (words.next(), words.next(), words.next(), words.next()) {
        (Some("PORT"), Some(port), Some("RECORDING"), Some(path)) => {
            (port.parse::<u16>().ok(), PathBuf::from(path))
        }
        _ => (None, PathBuf::new()),
    };
    let port = port.unwrap_or_else(|| {
        let status = child.try_wait().ok().flatten();
        panic!(
            "the moto server did not start (said {line:?}, exit {status:?}); is moto[server] \
             installed in the venv? run scripts/bootstrap"
        )
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "moto announced port {port} but does not accept connections after 20 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Moto {
        endpoint: format!("http://127.0.0.1:{port}"),
        port,
        recording,
        _guard: Mutex::new((child, stdin)),
    }
}
