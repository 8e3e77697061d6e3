// Package router is gpusched-router: an OpenAI- and Anthropic-compatible
// HTTP router that routes each request by its JSON body's "model" to one of
// the model servers of its config, and wakes that model through the daemon
// (cold start, thaw from host RAM, or restore from disk) while the request
// waits. It talks to gpuschedd only through pkg/api, as the ordinary user
// it runs as; each model is a managed process of that user named after the
// model. docs/router.md has the design, config and endpoints.
package router
