//! Every route of the API, each registered with its handler's `#[utoipa::path]`: the router and the OpenAPI
//! document come from this one list, so a route cannot be served undocumented, and the auth matrix test (which
//! walks the document) cannot miss one.

use axum::Router;
use utoipa::OpenApi;
use utoipa::openapi::OpenApi as Document;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::openapi::{ApiDoc, publish};
use crate::{
    AppState, bmc_actions, catalog, certificates, clusters, deploy, media, metrics, openapi, registration,
    self_update, servers, triage, triage_actions, update_catalog, updates,
};

/// The operations the request deadline covers (everything but the media streams), and the media streams.
pub(crate) struct Routes {
    pub timed: OpenApiRouter<AppState>,
    pub streams: OpenApiRouter<AppState>,
}

pub(crate) fn routes() -> Routes {
    let timed = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(servers::list, servers::create))
        .routes(routes!(servers::show, servers::update, servers::remove))
        .routes(routes!(servers::events))
        .routes(routes!(certificates::repin))
        .routes(routes!(catalog::list_tokens, catalog::create_token))
        .routes(routes!(catalog::show_token, catalog::delete_token))
        .routes(routes!(catalog::list_seeds, catalog::create_seed))
        .routes(routes!(catalog::list_profiles, catalog::put_profile))
        .routes(routes!(catalog::delete_profile))
        .routes(routes!(catalog::list_images, catalog::create_image))
        .routes(routes!(catalog::get_public_address, catalog::put_public_address))
        .routes(routes!(registration::register))
        .routes(routes!(self_update::self_update))
        .routes(routes!(updates::list, update_catalog::publish))
        .routes(routes!(updates::show))
        .routes(routes!(updates::files))
        .routes(routes!(clusters::list, clusters::create))
        .routes(routes!(clusters::show, clusters::remove))
        .routes(routes!(clusters::update_action))
        .routes(routes!(clusters::reboot_action))
        .routes(routes!(clusters::cancel_action))
        .routes(routes!(clusters::pause_action))
        .routes(routes!(clusters::resume_action))
        .routes(routes!(certificates::cluster_repin))
        .routes(routes!(deploy::deploy_action))
        .routes(routes!(deploy::cancel_action))
        .routes(routes!(bmc_actions::power))
        .routes(routes!(bmc_actions::media))
        .routes(routes!(triage::list))
        .routes(routes!(triage::groups))
        .routes(routes!(triage::show))
        .routes(routes!(triage_actions::retry))
        .routes(routes!(triage_actions::discard))
        .routes(routes!(triage_actions::cancel))
        .routes(routes!(triage_actions::bulk_retry))
        .routes(routes!(triage::stuck))
        .routes(routes!(triage::state_durations))
        .routes(routes!(openapi::serve_document))
        .routes(routes!(metrics::serve_metrics));
    let streams = OpenApiRouter::new()
        .routes(routes!(media::serve_media))
        .routes(routes!(updates::download));
    Routes { timed, streams }
}

/// The routers (timed, streams) and the document they make together, action paths in their public spelling.
pub(crate) fn split() -> (Router<AppState>, Router<AppState>, Document) {
    let Routes { timed, streams } = routes();
    let (timed, mut doc) = timed.split_for_parts();
    let (streams, streams_doc) = streams.split_for_parts();
    doc.merge(streams_doc);
    (timed, streams, publish(doc))
}

/// The media streams alone, for the plain-HTTP media listener (`[api] media_listen`): nothing else of the API is
/// reachable there.
pub(crate) fn media_only() -> Router<AppState> {
    OpenApiRouter::new()
        .routes(routes!(media::serve_media))
        .split_for_parts()
        .0
}
