// Renders posts with Mattermost's own Markdown renderers, one JSON line in, one out.
//
//   in:  {"text": "<the post's message>"}
//   out: {"web": R, "mobile": R}, R = {"images": [src], "links": [href], "text": "...", "ms": n}
//
// web: the web app's renderer, the marked fork it pins (vendor/marked) with the web
// app's URL autolinker installed (vendor/mattermost-webapp/autolink.js) and the
// options of its formatWithRenderer (utils/markdown/index.ts): sanitize, gfm,
// tables, no mangling, inline LaTeX on, and a URL filter that lets every scheme
// through (the owner may list any custom scheme). Images and links are read from
// the HTML it writes; text is the HTML's text.
// mobile: the mobile app's parser, @mattermost/commonmark with the options of its
// Markdown component (urlFilter, minimumHashtagLength 3); images and links are the
// AST's image and link nodes (autolinks included); text is every literal in order.
'use strict';

const readline = require('readline');
const marked = require('./vendor/marked/marked.js');
require('./vendor/mattermost-webapp/autolink.js');
const {Parser} = require('@mattermost/commonmark');

const ENTITIES = {amp: '&', lt: '<', gt: '>', quot: '"', '#39': "'", nbsp: '\u00a0'};

function decode(html) {
    return html.replace(/&(#x[0-9a-f]+|#[0-9]+|[a-z0-9]+);/gi, (whole, name) => {
        if (name[0] === '#') {
            const code = name[1] === 'x' || name[1] === 'X' ? parseInt(name.slice(2), 16) : parseInt(name.slice(1), 10);
            return String.fromCodePoint(code);
        }
        return ENTITIES[name] !== undefined ? ENTITIES[name] : whole;
    });
}

function attributes(tag, name) {
    const found = new RegExp(`\\s${name}="([^"]*)"`, 'i').exec(tag);
    return found ? decode(found[1]) : '';
}

function web(text) {
    const started = process.hrtime.bigint();
    const html = marked(text, {
        sanitize: true,
        gfm: true,
        tables: true,
        mangle: false,
        inlinelatex: true,
        urlFilter: () => true,
    });
    const ms = Number(process.hrtime.bigint() - started) / 1e6;
    const images = [];
    const links = [];
    for (const tag of html.match(/<(img|a)\b[^>]*>/gi) || []) {
        if (/^<img/i.test(tag)) {
            images.push(attributes(tag, 'src'));
        } else {
            links.push(attributes(tag, 'href'));
        }
    }
    // a link's target is part of what the owner can read (hover, open): after its text
    const shown = html
        .replace(/<span data-inline-latex="([^"]*)"><\/span>/g, (whole, code) => `$${code}$`)
        .replace(/<a\b[^>]*?href="([^"]*)"[^>]*>([\s\S]*?)<\/a>/gi, (whole, href, inner) => `${inner} ${href}`)
        .replace(/<img\b[^>]*?alt="([^"]*)"[^>]*>/gi, (whole, alt) => alt);
    const visible = decode(shown.replace(/<[^>]*>/g, ''));
    return {images, links, text: visible, ms};
}

// Mattermost's own inline nodes, written back as the text they stand for
const LITERAL = {
    at_mention: (node) => `@${node._mentionName}`,
    channel_link: (node) => `~${node._channelName}`,
    hashtag: (node) => `#${node._hashtag}`,
    emoji: (node) => `:${node._emojiName}:`,
    latex_inline: (node) => `$${node._latexCode}$`,
};

function mobile(text, parser) {
    const started = process.hrtime.bigint();
    const ast = parser.parse(text);
    const ms = Number(process.hrtime.bigint() - started) / 1e6;
    const images = [];
    const links = [];
    const pieces = [];
    const walker = ast.walker();
    let event;
    while ((event = walker.next())) {
        const node = event.node;
        if (!event.entering) {
            if (node.type === 'link') {
                pieces.push(` ${node.destination}`);
            }
            continue;
        }
        if (node.type === 'image') {
            images.push(node.destination);
        } else if (node.type === 'link') {
            links.push(node.destination);
        } else if (LITERAL[node.type]) {
            pieces.push(LITERAL[node.type](node));
        } else if (node.type === 'softbreak' || node.type === 'linebreak') {
            pieces.push('\n');
        } else if (node.literal !== null && node.literal !== undefined) {
            pieces.push(node.literal);
        }
        if (node.type === 'paragraph' || node.type === 'code_block' || node.type === 'heading') {
            pieces.push('\n');
        }
    }
    return {images, links, text: pieces.join(''), ms};
}

const parser = new Parser({urlFilter: () => true, minimumHashtagLength: 3});
const lines = readline.createInterface({input: process.stdin});
lines.on('line', (line) => {
    const {text} = JSON.parse(line);
    let answer;
    try {
        answer = {web: web(text), mobile: mobile(text, parser)};
    } catch (error) {
        answer = {error: String(error && error.stack ? error.stack : error)};
    }
    process.stdout.write(`${JSON.stringify(answer)}\n`);
});
