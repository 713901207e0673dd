//! What the component boundary costs, without HTTP: the same calls the
//! server makes for each request (`ComponentSet::get_record` and `list`),
//! in a loop on one thread against the data set, with the components and
//! with the native baseline, blocks alternating. The difference is
//! instantiation, the WASI context, the host-call crossings with their
//! copies and the guest's own code; `perf record` of this loop (the
//! command is in the report) attributes it.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};
use esr_runtime::{ComponentEngine, ComponentRegistry, ComponentSet, Limits, QueryParam, Request, Tenant};
use uuid::Uuid;

use crate::Args;
use crate::stats::median;

/// Calls per block; blocks alternate between the modes.
const CALLS_PER_BLOCK: usize = 2_000;

/// One call the server makes, on a component set and a caller.
type Call = dyn Fn(&ComponentSet, &Tenant) -> anyhow::Result<()>;

struct Operation {
    name: &'static str,
    call: Box<Call>,
}

pub(crate) fn bench_boundary(args: &Args, data_dir: &Path) -> anyhow::Result<String> {
    let store = esr::store::open_existing_sled(data_dir)?;
    let keys: serde_json::Value = serde_json::from_slice(&std::fs::read(data_dir.join("seed-keys.json"))?)?;
    let organization_id: Uuid = keys["organizations"][0]["organization_id"]
        .as_str()
        .ok_or_else(|| anyhow!("no organization in seed-keys.json"))?
        .parse()?;
    let organization = store.organization(organization_id)?.context("the seeded organization is missing")?;
    let tenant = Tenant {
        store: store.clone(),
        organization_id,
        organization_json: Arc::new(
            serde_json::json!({
                "organization_id": organization.organization_id,
                "name": organization.name,
                "enrollment_token": organization.enrollment_token,
            })
            .to_string()
            .into_bytes(),
        ),
        reads: Arc::default(),
        call_time: Some(Limits::default().deadline),
    };
    let load = |native: Option<Arc<dyn esr_runtime::NativeCalls>>| -> anyhow::Result<Arc<ComponentSet>> {
        let engine = ComponentEngine::new(Limits::default())?.with_cache(data_dir.join("component-cache"));
        Ok(ComponentRegistry::load_serving(engine, &args.plugins_dir, native)?.current())
    };
    let wasm = load(None)?;
    let native = load(Some(Arc::new(esr::native::NativeBaseline)))?;

    let findings = "vulnerability-findings";
    // Ids from the native baseline: a list call would leave the pages it
    // wrote resident in a component's memory slot, which every later
    // list call's reset then zeroes again (measured alone in the report).
    let page = native.list(findings, tenant.clone(), &request(&[("limit", "100")]), "bench").map_err(failed)?.0;
    let page: serde_json::Value = serde_json::from_slice(&page.data)?;
    let ids: Vec<String> = crate::data::ids_of_page(&serde_json::json!({ "data": page }));
    let endpoint_id = page[0]["endpoint_id"]
        .as_str()
        .or_else(|| page[0]["endpointId"].as_str())
        .ok_or_else(|| anyhow!("a finding without its endpoint"))?
        .to_owned();
    if ids.is_empty() {
        anyhow::bail!("the data set has no findings");
    }
    let by_id = Arc::new(ids);
    let after_list = by_id.clone();
    let calls = std::cell::Cell::new(0_usize);
    let operations = [
        Operation {
            name: "finding by id",
            call: Box::new(move |set, tenant| {
                let id = &by_id[fastrand_index(by_id.len())];
                set.get_record(findings, tenant.clone(), id, &request(&[]), "bench").map_err(failed)?;
                Ok(())
            }),
        },
        Operation {
            // The same after a list page (once a block): a get keeps to slots
            // of its own, so the pages a list leaves resident in its slot
            // are not the get's to reset (they were until 2026-12-05).
            name: "finding by id, after a list page",
            call: Box::new(move |set, tenant| {
                if calls.replace(calls.get() + 1).is_multiple_of(CALLS_PER_BLOCK) {
                    set.list(findings, tenant.clone(), &request(&[("limit", "100")]), "bench").map_err(failed)?;
                }
                let id = &after_list[fastrand_index(after_list.len())];
                set.get_record(findings, tenant.clone(), id, &request(&[]), "bench").map_err(failed)?;
                Ok(())
            }),
        },
        Operation {
            name: "findings?endpointId=… first page",
            call: Box::new(move |set, tenant| {
                set.list(findings, tenant.clone(), &request(&[("endpointId", &endpoint_id)]), "bench")
                    .map_err(failed)?;
                Ok(())
            }),
        },
        Operation {
            name: "findings?severity=critical (with total)",
            call: Box::new(|set, tenant| {
                set.list(findings, tenant.clone(), &request(&[("severity", "critical")]), "bench").map_err(failed)?;
                Ok(())
            }),
        },
    ];

    let rounds = args.rounds.clamp(3, 500);
    let mut report = format!(
        "\n== The component boundary without HTTP: one thread, {CALLS_PER_BLOCK} calls a block, \
         modes alternating, medians of {rounds} blocks (µs a call) ==\n\
         phases: dev-tools/bench/scripts/boundary-phases.py (its header has the commands)\n\n\
         {:<44} {:>10} {:>10} {:>10} {:>8}\n",
        "operation", "wasm", "native", "difference", "ratio"
    );
    let wanted = args.boundary_case.as_deref().unwrap_or_default();
    for operation in operations.iter().filter(|operation| operation.name.contains(wanted)) {
        let (mut wasm_us, mut native_us) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            wasm_us.push(time_block(&wasm, &tenant, &operation.call)?);
            native_us.push(time_block(&native, &tenant, &operation.call)?);
        }
        let (wasm_us, native_us) = (median(wasm_us), median(native_us));
        writeln!(
            report,
            "{:<44} {wasm_us:>10.2} {native_us:>10.2} {:>10.2} {:>8.2}",
            operation.name,
            wasm_us - native_us,
            native_us / wasm_us
        )?;
    }
    if wanted.is_empty() {
        report.push_str(&crate::instance_floor::instance_floor(&args.plugins_dir, rounds)?);
    }
    Ok(report)
}

/// µs a call, over one block.
fn time_block(set: &ComponentSet, tenant: &Tenant, call: &Call) -> anyhow::Result<f64> {
    let started = Instant::now();
    for _ in 0..CALLS_PER_BLOCK {
        call(set, tenant)?;
    }
    Ok(duration_us(started.elapsed()) / CALLS_PER_BLOCK as f64)
}

fn duration_us(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

fn request(query: &[(&str, &str)]) -> Request {
    Request {
        query: query.iter().map(|(name, value)| QueryParam { name: (*name).into(), value: (*value).into() }).collect(),
        path: "/v1/vulnerability-findings".into(),
        base_url: "http://127.0.0.1:8080".into(),
    }
}

fn fastrand_index(len: usize) -> usize {
    rand::Rng::gen_range(&mut rand::thread_rng(), 0..len)
}

fn failed(error: esr_runtime::CallError) -> anyhow::Error {
    anyhow!("a call failed: {error:?}")
}
