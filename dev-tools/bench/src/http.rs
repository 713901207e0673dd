//! HTTP/1.1 by hand: the keep-alive client of the latency cases and the
//! request and response framing the paced loader shares.

use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use serde_json::Value;

/// Reads one HTTP/1.1 response with a `Content-Length`; anything but a
/// `200` is an error.
pub(crate) async fn read_response(connection: &mut tokio::net::TcpStream, buffer: &mut [u8]) -> anyhow::Result<()> {
    use tokio::io::AsyncReadExt;
    let mut filled = 0;
    let (header_end, length) = loop {
        let read = connection.read(&mut buffer[filled..]).await?;
        if read == 0 {
            bail!("the server closed the connection");
        }
        filled += read;
        if let Some(head) = response_head(&buffer[..filled])? {
            break head;
        }
        if filled == buffer.len() {
            bail!("response headers larger than {} bytes", buffer.len());
        }
    };
    let mut remaining = (header_end + length).saturating_sub(filled);
    let capacity = buffer.len();
    while remaining > 0 {
        let read = connection.read(&mut buffer[..remaining.min(capacity)]).await?;
        if read == 0 {
            bail!("the server closed the connection mid-body");
        }
        remaining -= read;
    }
    Ok(())
}

/// An HTTP/1.1 `GET` of `path` with the API key, as bytes to send.
pub(crate) fn get_request(host: &str, path: &str, key: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n\r\n")
}

/// Where a response's head ends and how long its body is, once `received`
/// holds the whole head; a status other than `200` is an error.
fn response_head(received: &[u8]) -> anyhow::Result<Option<(usize, usize)>> {
    let Some(end) = received.windows(4).position(|w| w == b"\r\n\r\n") else { return Ok(None) };
    let head = String::from_utf8_lossy(&received[..end]).to_ascii_lowercase();
    if !head.starts_with("http/1.1 200") {
        bail!("the server answered {}", head.lines().next().unwrap_or_default());
    }
    let length = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|n| n.trim().parse::<usize>().ok())
        .ok_or_else(|| anyhow!("a response without Content-Length"))?;
    Ok(Some((end + 4, length)))
}

/// One keep-alive HTTP/1.1 connection, used from the calling thread. The
/// latency cases use it rather than reqwest's blocking client, which
/// hands each request and each piece of a body to a runtime thread of its
/// own: on this machine those hand-offs added about 1 ms to a get-by-id
/// the server answers in 0.2 ms (curl).
pub(crate) struct ApiClient {
    stream: std::net::TcpStream,
    host: String,
    key: String,
    buffer: Vec<u8>,
}

impl ApiClient {
    pub(crate) fn connect(base: &str, key: &str) -> anyhow::Result<ApiClient> {
        let host = base.strip_prefix("http://").ok_or_else(|| anyhow!("not an http URL: {base}"))?.to_owned();
        let stream = std::net::TcpStream::connect(&host)?;
        stream.set_nodelay(true)?;
        // A server that stops answering fails the run instead of hanging it.
        stream.set_read_timeout(Some(Duration::from_secs(120)))?;
        Ok(ApiClient { stream, host, key: key.to_owned(), buffer: Vec::new() })
    }

    /// `GET` with the key: how long it took (body read and parsed) and the
    /// JSON body; anything but a `200` is an error.
    pub(crate) fn get(&mut self, path: &str) -> anyhow::Result<(Duration, Value)> {
        use std::io::{Read, Write};
        let started = Instant::now();
        let request = get_request(&self.host, path, &self.key);
        self.stream.write_all(request.as_bytes())?;
        self.buffer.clear();
        let mut chunk = [0u8; 1 << 16];
        let (header_end, length) = loop {
            let read = self.stream.read(&mut chunk)?;
            if read == 0 {
                bail!("GET {path}: the server closed the connection");
            }
            self.buffer.extend_from_slice(&chunk[..read]);
            if let Some(head) = response_head(&self.buffer).with_context(|| format!("GET {path}"))? {
                break head;
            }
        };
        while self.buffer.len() < header_end + length {
            let read = self.stream.read(&mut chunk)?;
            if read == 0 {
                bail!("GET {path}: the server closed the connection mid-body");
            }
            self.buffer.extend_from_slice(&chunk[..read]);
        }
        let body: Value = serde_json::from_slice(&self.buffer[header_end..header_end + length])?;
        Ok((started.elapsed(), body))
    }
}
