// Renders this server's OpenAPI document with the vendored Swagger UI
// (`GET /docs`). A file of its own, not an inline script, so the page's
// Content-Security-Policy can refuse inline scripts.
"use strict";

// Every request the page makes (the document, "try it out", a token
// request) goes to this server only, so a key typed here goes nowhere
// else; the page's `connect-src 'self'` holds the browser to it as well.
function thisServerOnly(request) {
  if (new URL(request.url, window.location.href).origin !== window.location.origin) {
    throw new Error("this page sends requests only to " + window.location.origin);
  }
  return request;
}

window.ui = SwaggerUIBundle({
  url: "/v1/openapi.json",
  dom_id: "#swagger-ui",
  // No `?url=` or `?configUrl=` can point the page at another document.
  queryConfigEnabled: false,
  // No validator badge: it would be fetched from the validator's site.
  validatorUrl: null,
  // A key lasts as long as the page: never kept in the browser's storage.
  persistAuthorization: false,
  withCredentials: false,
  requestInterceptor: thisServerOnly,
  displayOperationId: true,
  displayRequestDuration: true,
  deepLinking: true,
  docExpansion: "list",
});
