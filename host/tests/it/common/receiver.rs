//! A webhook receiver for the tests: a plain HTTP/1.1 server on loopback
//! that keeps every request it gets (headers and body) and answers as the
//! test says, per request: a status, after an optional delay.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// One request received.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// Header names lowercased.
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
    /// What the receiver answered.
    pub status: u16,
    pub received: Instant,
}

impl Delivery {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }

    pub fn events(&self) -> Vec<Value> {
        self.json()["events"].as_array().unwrap().clone()
    }

    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).map_or("", String::as_str)
    }
}

/// How to answer the `n`th request (from 0): a status, after a wait.
pub type Answering = dyn Fn(usize) -> (u16, Duration) + Send + Sync;

pub struct Receiver {
    pub url: String,
    received: Arc<Mutex<Vec<Delivery>>>,
    answering: Arc<Mutex<Arc<Answering>>>,
}

impl Receiver {
    /// A receiver answering `200` at once.
    pub fn start() -> Receiver {
        Receiver::answering(|_| (200, Duration::ZERO))
    }

    pub fn answering(answer: impl Fn(usize) -> (u16, Duration) + Send + Sync + 'static) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://127.0.0.1:{}/hook", listener.local_addr().unwrap().port());
        let received: Arc<Mutex<Vec<Delivery>>> = Arc::default();
        let answering: Arc<Mutex<Arc<Answering>>> = Arc::new(Mutex::new(Arc::new(answer)));
        let counter = Arc::new(Mutex::new(0usize));
        let (kept, how) = (received.clone(), answering.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (kept, how, counter) = (kept.clone(), how.clone(), counter.clone());
                std::thread::spawn(move || serve(stream, &kept, &how, &counter));
            }
        });
        Receiver { url, received, answering }
    }

    /// Answers the following requests so.
    pub fn answer_with(&self, answer: impl Fn(usize) -> (u16, Duration) + Send + Sync + 'static) {
        *self.answering.lock().unwrap() = Arc::new(answer);
    }

    pub fn deliveries(&self) -> Vec<Delivery> {
        self.received.lock().unwrap().clone()
    }

    /// The events of every acknowledged (`2xx`) delivery, in order.
    pub fn acknowledged_events(&self) -> Vec<Value> {
        self.deliveries()
            .iter()
            .filter(|delivery| (200..300).contains(&delivery.status))
            .flat_map(Delivery::events)
            .collect()
    }

    /// Waits until an acknowledged delivery holds an event at `sequence`
    /// or later.
    pub fn wait_for_sequence(&self, sequence: u64, bound: Duration) {
        super::wait_until(bound, &format!("a delivery reaching sequence {sequence}"), || {
            self.acknowledged_events().iter().any(|event| event["sequence"].as_u64().unwrap() >= sequence)
        });
    }
}

fn serve(stream: TcpStream, kept: &Mutex<Vec<Delivery>>, how: &Mutex<Arc<Answering>>, counter: &Mutex<usize>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let mut headers = HashMap::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
            }
        }
        let length: usize = headers.get("content-length").and_then(|length| length.parse().ok()).unwrap_or(0);
        let mut body = vec![0u8; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let number = {
            let mut counter = counter.lock().unwrap();
            *counter += 1;
            *counter - 1
        };
        let answer = how.lock().unwrap().clone();
        let (status, wait) = answer(number);
        let received = Instant::now();
        std::thread::sleep(wait);
        kept.lock().unwrap().push(Delivery { headers, body, status, received });
        let reply = format!("HTTP/1.1 {status} Answer\r\ncontent-length: 2\r\n\r\nok");
        if writer.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}
