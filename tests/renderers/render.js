// Renders posts with Mattermost's own Markdown renderers, one JSON line in, one out.
//
//   in:  {"text": "<the post's message>"}
//   out: {"web": R, "mobile": R},
//        R = {"images": [src], "links": [href], "headings": [text], "text": "...", "ms": n}
//        or, where that renderer threw, R = {"error": "..."}
//
// web: the web app's renderer, the marked fork it pins (vendor/marked) with the web
// app's URL autolinker installed (vendor/mattermost-webapp/autolink.js) and the
// options of its formatWithRenderer (utils/markdown/index.ts): sanitize, gfm,
// tables, no mangling, inline LaTeX on, and a URL filter that lets every scheme
// through (the owner may list any custom scheme). Images, links and headings
// (h1 to h6, each as its text) are read from the HTML it writes; text is the HTML's
// text.
// mobile: the mobile app's parser, @mattermost/commonmark with the options of its
// Markdown component (urlFilter, minimumHashtagLength 3); images, links and headings
// are the AST's image, link and heading nodes (autolinks included; a heading as the
// literals inside it); text is every literal in order.
'use strict';

const readline = require('readline');
const marked = require('./vendor/marked/marked.js');
require('./vendor/mattermost-webapp/autolink.js');
const {Parser} = require('@mattermost/commonmark');
// HTML's own decoding of character references, as a browser reads the web app's HTML
// (every HTML5 name): the `entities` package, which @mattermost/commonmark depends on
const {decodeHTML} = require('entities');

function decode(html) {
    return decodeHTML(html);
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
    const read = html
        .replace(/<span data-inline-latex="([^"]*)"><\/span>/g, (whole, code) => `$${code}$`)
        .replace(/<img\b[^>]*?alt="([^"]*)"[^>]*>/gi, (whole, alt) => alt);
    const headings = [];
    for (const found of read.matchAll(/<h[1-6]\b[^>]*>([\s\S]*?)<\/h[1-6]>/gi)) {
        headings.push(decode(found[1].replace(/<[^>]*>/g, '')));
    }
    // a link's target is part of what the owner can read (hover, open): after its text
    const shown = read.replace(
        /<a\b[^>]*?href="([^"]*)"[^>]*>([\s\S]*?)<\/a>/gi,
        (whole, href, inner) => `${inner} ${href}`,
    );
    const visible = decode(shown.replace(/<[^>]*>/g, ''));
    return {images, links, headings, text: visible, ms};
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
    const headings = [];
    const pieces = [];
    let heading = null; // the text of the heading being walked, less its links' targets
    const walker = ast.walker();
    let event;
    while ((event = walker.next())) {
        const node = event.node;
        if (!event.entering) {
            if (node.type === 'link') {
                pieces.push(` ${node.destination}`);
            } else if (node.type === 'heading') {
                headings.push(heading.join(''));
                heading = null;
            }
            continue;
        }
        const before = pieces.length;
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
        if (heading !== null) {
            heading.push(...pieces.slice(before));
        }
        if (node.type === 'paragraph' || node.type === 'code_block' || node.type === 'heading') {
            pieces.push('\n');
        }
        if (node.type === 'heading') {
            heading = [];
        }
    }
    return {images, links, headings, text: pieces.join(''), ms};
}

const parser = new Parser({urlFilter: () => true, minimumHashtagLength: 3});
const lines = readline.createInterface({input: process.stdin});
lines.on('line', (line) => {
    const {text} = JSON.parse(line);
    const answer = {};
    for (const [name, render] of [['web', web], ['mobile', (post) => mobile(post, parser)]]) {
        try {
            answer[name] = render(text);
        } catch (error) {
            answer[name] = {error: String(error && error.stack ? error.stack : error)};
        }
    }
    process.stdout.write(`${JSON.stringify(answer)}\n`);
});
