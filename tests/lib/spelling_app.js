// A Node upstream for test_spellings.py:   node spelling_app.js PORT
//
// It routes as Node servers commonly do, by the WHATWG URL parser:
// new URL(req.url, 'http://x').pathname (which reads "\" as "/"), with
// repeated and trailing slashes ignored. The protected handler is
// POST /api/courses: every execution is counted and answered 201
// {"n": COUNT}. GET /__count answers {"count": N}; any other GET answers
// 200 {"path": ..., "target": ...}, the pathname and req.url as it came;
// anything else 404, and a target new URL() refuses 400.
'use strict';
const http = require('http');

const PROTECTED = '/api/courses';
let count = 0;

function route(path) {
	return path.replace(/\/+/g, '/').replace(/\/$/, '') || '/';
}

function answer(method, path, target) {
	if (method === 'GET' && path === '/__count')
		return [200, {count}];
	if (method === 'POST' && route(path) === PROTECTED)
		return [201, {n: ++count}];
	if (method === 'GET')
		return [200, {path, target}];
	return [404, {path}];
}

const server = http.createServer((req, res) => {
	req.resume();
	req.on('end', () => {
		let path = null;
		try {
			path = new URL(req.url, 'http://x').pathname;
		} catch (e) {
			// not a URL: no route
		}
		const [status, doc] = path === null ? [400, {target: req.url}]
						     : answer(req.method, path, req.url);
		const body = JSON.stringify(doc);
		res.writeHead(status, {'Content-Type': 'application/json',
				       'Content-Length': Buffer.byteLength(body)});
		res.end(body);
	});
});
server.listen(Number(process.argv[2]), '127.0.0.1');
