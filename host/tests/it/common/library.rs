//! The host's library without the server: the real components loaded in
//! a pooled engine, over a real sled store with the demo data, called as
//! the first demo organization.

use std::sync::Arc;

use esr_runtime::{ComponentRegistry, Limits, QueryParam, Request, Tenant};
use uuid::Uuid;

pub struct Library {
    /// The sled store's directory, removed on drop.
    pub dir: tempfile::TempDir,
    pub db: Arc<dyn esr::store::Store>,
    pub registry: ComponentRegistry,
    pub organization_id: Uuid,
    pub tenant: Tenant,
}

/// The demo data in a fresh store and the components of `make plugins`.
pub fn library() -> Library {
    let dir = tempfile::tempdir().unwrap();
    let db = esr::store::open(None, dir.path()).unwrap();
    let keys = esr_demo::seed::seed_demo_if_empty(db.as_ref(), dir.path()).unwrap().unwrap();
    let organization_id = keys.organizations[0].organization_id;
    let engine = esr_runtime::ComponentEngine::new(Limits::default()).unwrap();
    let registry = ComponentRegistry::load(engine, &super::plugins_dir()).unwrap();
    let tenant = Tenant {
        store: db.clone(),
        organization_id,
        organization_json: Arc::new(b"{}".to_vec()),
        reads: Default::default(),
        call_time: None,
    };
    Library { dir, db, registry, organization_id, tenant }
}

/// A request of the findings' list or one finding with this query.
pub fn findings_request(query: &[(&str, &str)]) -> Request {
    Request {
        query: query.iter().map(|(n, v)| QueryParam { name: (*n).to_owned(), value: (*v).to_owned() }).collect(),
        path: "/v1/vulnerability-findings".into(),
        base_url: "http://localhost".into(),
    }
}
