// Preload for Node servers that listen on every interface: force 127.0.0.1.
//
//   NODE_OPTIONS="--require /abs/path/tests/peers/loopback-only.cjs" PORT=0 node server.js
//
// Every net.Server.listen() call that names no host (listen(port[, cb]),
// listen({port}), listen()) is rewritten to listen on 127.0.0.1; a call that names a
// host other than 127.0.0.1, or a pipe/handle, throws instead of binding elsewhere.
//
// If TRUNKLINE_LISTENING_PATH is set (e.g. "/mcp"), the first server to start
// listening prints `LISTENING http://127.0.0.1:<port><path>` on stdout, so a server
// started with PORT=0 tells the tests which port it got (tests/httppeers.py waits
// for that line).
'use strict';

const net = require('net');

const LOOPBACK = '127.0.0.1';
const original = net.Server.prototype.listen;
let announced = false;

function announce(server) {
  const path = process.env.TRUNKLINE_LISTENING_PATH;
  if (path === undefined || announced) return;
  announced = true;
  process.stdout.write(`LISTENING http://${LOOPBACK}:${server.address().port}${path}\n`);
}

function isPort(value) {
  return typeof value === 'number' || (typeof value === 'string' && /^\d+$/.test(value));
}

net.Server.prototype.listen = function listen(...args) {
  const first = args[0];
  if (first === undefined || typeof first === 'function') {
    args.unshift(0, LOOPBACK); // listen() / listen(cb): an ephemeral port
  } else if (isPort(first)) {
    if (typeof args[1] === 'string' && args[1] !== LOOPBACK) {
      throw new Error(`loopback-only: refusing to listen on host ${args[1]}`);
    }
    if (typeof args[1] !== 'string') args.splice(1, 0, LOOPBACK);
  } else if (first !== null && typeof first === 'object' && 'port' in first
             && first.path === undefined && first.handle === undefined && first.fd === undefined) {
    if (first.host !== undefined && first.host !== LOOPBACK) {
      throw new Error(`loopback-only: refusing to listen on host ${first.host}`);
    }
    args[0] = { ...first, host: LOOPBACK };
  } else {
    throw new Error('loopback-only: refusing a listen() that is not a TCP port on 127.0.0.1');
  }
  this.once('listening', () => announce(this));
  return original.apply(this, args);
};
