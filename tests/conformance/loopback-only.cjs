// Preload for the conformance harness: every server it starts listens on 127.0.0.1 only.
//
//   NODE_OPTIONS="--require /path/to/loopback-only.cjs"
//
// The harness's mock MCP and OAuth servers call `server.listen(0)` with no host, which
// binds every interface (`::`). This patch adds host 127.0.0.1 to any listen() on a TCP
// port that names no host (an explicit host, a unix socket path, an fd or a handle is left
// alone). Several mocks read `server.address().port` synchronously right after listen(),
// and listen(port, host) normally does an asynchronous dns.lookup first; so for the
// duration of our own listen() call the literal 127.0.0.1 is answered synchronously.
// The URLs the harness hands out still say `localhost`, which resolves to 127.0.0.1.
'use strict';

const net = require('net');
const dns = require('dns');

const LOOPBACK = '127.0.0.1';
const originalListen = net.Server.prototype.listen;

net.Server.prototype.listen = function listenOnLoopback(...args) {
  const first = args[0];
  let forced = false;
  if (first !== null && typeof first === 'object' && !Array.isArray(first)) {
    // listen({port, ...}): add the host unless it names one or is not a TCP port.
    const other = first.host !== undefined || first.path !== undefined || first.fd !== undefined
      || first.handle !== undefined || first._handle !== undefined;
    if ('port' in first && !other) {
      args[0] = { ...first, host: LOOPBACK };
      forced = true;
    }
  } else if (typeof first === 'number' || (typeof first === 'string' && /^\d+$/.test(first))) {
    // listen(port[, host][, backlog][, cb])
    if (typeof args[1] !== 'string') {
      args.splice(1, 0, LOOPBACK);
      forced = true;
    } else {
      forced = args[1] === LOOPBACK;
    }
  } else if (first === undefined || typeof first === 'function') {
    // listen() / listen(cb): a random port on every interface; make it loopback.
    args.unshift(0, LOOPBACK);
    forced = true;
  }
  if (!forced) {
    return originalListen.apply(this, args);
  }
  const savedLookup = dns.lookup;
  dns.lookup = function synchronousLoopback(host, options, callback) {
    if (typeof options === 'function') {
      callback = options;
      options = {};
    }
    if (host === LOOPBACK) {
      if (options && options.all) callback(null, [{ address: LOOPBACK, family: 4 }]);
      else callback(null, LOOPBACK, 4);
      return {};
    }
    return savedLookup.call(this, host, options, callback);
  };
  try {
    return originalListen.apply(this, args);
  } finally {
    dns.lookup = savedLookup;
  }
};
