#!/usr/bin/env python3
"""Writes text_edit.jsonl (chat) and text_edit_prompt.jsonl (completions) beside
this script: 24 passages written for cellm, each to be rewritten with a few
small, explicit changes, the speculative-decoding workload of `cellm bench
serve --dataset` (README.md here says more).

max_tokens is 1.3x the passage's tokens, rounded up to a multiple of 8, as
counted by a running cellm server's /tokenize (the Gemma 3 270M tokenizer gave
the committed numbers):

  cellm serve models/gemma-3-270m-q4_k_m.gguf --port 8000 &
  python3 bench/datasets/make_text_edit.py http://127.0.0.1:8000
"""
import json
import os
import sys
import urllib.request

P = []
def add(text, edits):
    P.append((" ".join(text.split()), edits))

add("""Every Tuesday the bakery on Mill Street opens its doors at seven in the morning, but the work
starts long before that. Marta arrives at four, switches on the two deck ovens and checks the
dough that rested overnight in the cold room. The sourdough loaves go in first because they need
the highest heat, followed by the seeded rolls and, last of all, the cinnamon buns that regular
customers ask for by name. While the bread bakes she sweeps the floor, fills the display baskets
and writes the day's specials on the chalkboard by the window. By the time the first customer
knocks on the glass, the shop smells of toasted grain and warm sugar, and the shelves are full.""",
    [("Tuesday", "Friday"), ("seven", "nine")])

add("""Replacing a worn bicycle chain takes about twenty minutes with the right tools. First shift
the chain onto the smallest rear cog so that it hangs loose, then use a chain tool to push out
one of the pins. Lay the old chain next to the new one on a table and count the links, because
the new chain usually arrives a little too long. Remove the extra links with the same tool, thread
the chain through the rear derailleur and around the front ring, and join the two ends with the
quick link supplied in the box. Finally, turn the pedals backwards a few times and shift through
every gear to make sure nothing skips or rubs.""",
    [("twenty minutes", "half an hour"), ("quick link", "connecting pin")])

add("""The community garden committee met on Sunday afternoon in the shed behind the third row of
raised beds. Eleven members came, which is more than usual for the end of the season. The main
topic was the water supply: the old hose bursts every few weeks, and the treasurer proposed buying
two rain barrels instead. After a short discussion the group agreed to spend the money from the
spring plant sale on the barrels and a new set of shared trowels. Peter offered to build a wooden
stand so the barrels sit high enough to fill a watering can. The next meeting will be held in
March, when the seed orders need to be placed.""",
    [("Sunday", "Saturday"), ("Eleven", "Fourteen"), ("March", "February")])

add("""A household dishwasher follows the same basic program every time it runs. It begins by
pumping out any water left in the sump and then lets in fresh water, which a heating element warms
to around fifty degrees. The detergent door opens, and a pump forces the soapy water through the
spray arms, which spin because of the jets on their sides. After the main wash the dirty water is
drained and the machine rinses the dishes twice with clean water. In the last rinse it adds a small
amount of rinse aid so that water runs off the glasses in sheets instead of drying as spots. The
drying phase either uses the stored heat of the dishes or a fan that pulls out the damp air.""",
    [("fifty degrees", "sixty degrees"), ("twice", "three times")])

add("""Passengers travelling on the evening service to Harwick should expect a delay of about
fifteen minutes tonight. A signal fault near the river bridge means that trains are running on a
single track between Eastgate and Linford, so each train must wait for the one coming the other
way. Staff are on the platforms to help anyone who needs to change to a connecting bus at Linford.
The railway apologises for the inconvenience and advises travellers to check the departure boards
before boarding, as platform changes are possible. Tickets for this route will also be accepted on
the coach service that leaves from the station forecourt every half hour.""",
    [("Harwick", "Dunmore"), ("fifteen minutes", "twenty-five minutes")])

add("""Setting up a new wireless router at home is easier than it looks. Connect the router to the
modem with the network cable that came in the box and plug in the power adapter. Wait until the
status light turns solid green, which usually takes a minute or two. On a laptop or phone, join the
network whose name is printed on the sticker underneath the router and enter the password shown
there. Open a browser and go to the setup page listed in the manual, where you can choose a new
network name and a longer password. It is also worth turning on automatic updates, so that security
fixes are installed without you having to remember them.""",
    [("solid green", "solid blue"), ("a minute or two", "about five minutes")])

add("""The book club at the Westfield library has chosen its reading for the autumn. In September
the group will discuss a short novel about a lighthouse keeper who writes letters to a daughter he
has never met. October is set aside for a collection of essays on cooking and memory, and in
November members will read a detective story set in a snowed-in mountain hotel. Meetings take place
on the first Thursday of each month in the reading room upstairs, starting at half past six. Copies
of each book can be reserved at the front desk, and large print editions are available for two of
the three titles. New members are always welcome, and there is no need to sign up in advance.""",
    [("Westfield", "Northbrook"), ("Thursday", "Wednesday"), ("half past six", "seven o'clock")])

add("""Our plan for the hike is simple. We will meet at the car park below the ridge at eight and
walk the northern loop, which is about fourteen kilometres long with one steep climb near the
start. Bring at least two litres of water each, because there are no taps along the route, and
pack a warm layer even if the forecast is sunny, since the wind on the summit can be cold. We will
stop for lunch at the stone shelter beside the lake and should be back at the cars by mid afternoon.
If the weather turns bad, we will take the shorter path through the forest instead and skip the
summit altogether.""",
    [("eight", "half past seven"), ("fourteen", "sixteen"), ("lake", "waterfall")])

add("""From Monday the finance team will move from the second floor to the new offices on the
fifth floor. Please pack the contents of your desk into the crates provided by Thursday evening and
label each crate with your name and new desk number. The movers will carry everything upstairs on
Friday, and the network team will connect the computers over the weekend. Personal plants and
pictures should be taken home or moved by hand, as the movers cannot be responsible for them. The
kitchen on the fifth floor has a larger fridge, so please clear out any food left in the old one
before you leave. Thank you all for your patience during the move.""",
    [("finance team", "design team"), ("fifth floor", "fourth floor")])

add("""Ferns are forgiving houseplants as long as you remember that they come from damp forest
floors. Keep yours out of direct sunlight, which scorches the fronds, and place it somewhere bright
but shaded, such as a north facing windowsill. The soil should stay moist but never waterlogged,
so water a little every few days rather than a lot once a week. Ferns also like humid air: standing
the pot on a tray of wet pebbles helps, especially in winter when the heating dries the room. Trim
any brown fronds at the base with clean scissors, and feed the plant with a diluted fertiliser once
a month during spring and summer.""",
    [("north facing", "east facing"), ("once a month", "every two weeks")])

add("""This lentil soup feeds four people and takes under an hour. Chop one onion, two carrots and
two sticks of celery, and soften them in a large pan with a spoon of olive oil for about ten
minutes. Add two cloves of crushed garlic, a teaspoon of ground cumin and a pinch of chilli, and
stir for a minute until fragrant. Rinse two hundred grams of red lentils, tip them into the pan with
one litre of vegetable stock and a tin of chopped tomatoes, and simmer for twenty five minutes until
the lentils fall apart. Season with salt, pepper and a squeeze of lemon, then blend half of the soup
for a thicker texture and serve with warm bread.""",
    [("four people", "six people"), ("red lentils", "green lentils"), ("lemon", "lime")])

add("""Version 2.4 of the reporting tool is now available. The most visible change is the new export
dialog, which lets you save a report as a spreadsheet, a PDF or a plain text file in one step. Large
reports also open faster, because the tool now loads only the rows shown on screen and fetches the
rest as you scroll. Several bugs have been fixed, including one that put dates in the wrong order
when the language was set to German and another that lost unsaved filters after a crash. The old
command line option for batch printing has been removed; scripts that used it should switch to the
export command instead. As always, please send feedback through the help menu.""",
    [("Version 2.4", "Version 2.5"), ("German", "French")])

add("""Dear parents, on Wednesday the twelfth the children in year four will visit the natural
history museum as part of their project on fossils. The coach will leave the school gates at nine
sharp and return by three, in time for the usual pick up. Please make sure your child brings a
packed lunch in a bag with their name on it, a bottle of water and a coat, as part of the day will
be spent outdoors in the museum garden. The trip is free, but we ask for a voluntary contribution
of five pounds towards the cost of the coach. If you would like to join us as a helper, please
reply to this letter by Friday.""",
    [("Wednesday the twelfth", "Tuesday the eleventh"), ("five pounds", "four pounds")])

add("""The lighthouse on Gull Point was built in 1871 from granite blocks carried across the bay
on flat bottomed barges. For almost a century it was kept by families who lived in the small
cottage at its base, climbing the ninety six steps several times each night to wind the clockwork
that turned the lens. In 1968 the light was automated, and the last keeper moved to the village on
the mainland. Today the tower is looked after by a volunteer society that opens it to visitors on
summer weekends. From the gallery at the top you can see the whole coastline, and on clear days the
hills of the neighbouring island appear on the horizon.""",
    [("1871", "1868"), ("ninety six", "one hundred and four"), ("summer", "spring")])

add("""A sensible backup plan follows the three two one rule. Keep three copies of anything you
care about: the original and two backups. Store those copies on two different kinds of media, for
example an external hard drive and a cloud storage service, so that a single kind of failure cannot
destroy them all. Finally, keep one copy away from your home or office, because a fire or a burglary
can take every device in a building at once. Backups are only useful if they work, so once a month
try restoring a few files to make sure the process really does what you expect. Automate the daily
copies so that nobody has to remember them.""",
    [("external hard drive", "USB stick"), ("once a month", "every quarter")])

add("""Residents of Elm Road and Cedar Close are advised that electricity will be switched off on
Thursday between ten in the morning and two in the afternoon. Engineers need to replace a cable
under the pavement that was damaged during recent roadworks. Street lights and traffic signals at
the junction with the high street will not be affected. Please make sure that any medical equipment
that depends on mains power has a charged battery, and contact the helpline if you need advice. We
recommend keeping fridge and freezer doors closed during the outage so that food stays cold. Power
will be restored as soon as the work is complete, which may be earlier than planned.""",
    [("Elm Road", "Birch Lane"), ("Thursday", "Monday"), ("two in the afternoon", "three in the afternoon")])

add("""Cleaning the espresso machine is the last job of every shift. Start by running hot water
through each group head for a few seconds to flush out loose grounds. Fit the blind basket into the
portafilter, add half a teaspoon of cleaning powder and lock it into the machine. Run the pump for
ten seconds, stop it for ten seconds, and repeat this five times, then rinse with clean water the
same way. While the groups are rinsing, remove the steam wand tips and soak them in a jug of warm
water. Wipe the drip tray and the outside of the machine with a damp cloth, and leave the portafilters
upside down on the counter overnight so that they dry completely.""",
    [("half a teaspoon", "one teaspoon"), ("five times", "six times")])

add("""The new gallery on the ground floor of the city museum tells the story of the canal that
once ran through the centre of town. Visitors enter through a full size model of a lock gate and
walk past displays of tools used by the men who dug the channel by hand in the early nineteenth
century. A large map shows the route from the harbour to the brickworks at Stonebridge, with small
lights that follow the journey of a loaded barge. Children can try steering a model boat in a long
water table, and an audio guide reads from the diary of a lock keeper's daughter. The gallery is free
to enter and open every day except Monday.""",
    [("ground floor", "first floor"), ("Stonebridge", "Millford"), ("Monday", "Tuesday")])

add("""The swimming pool timetable changes for the winter months. Early morning lane swimming will
run from half past six to nine on weekdays, with the fast lane on the left and the slow lane beside
the windows. Family sessions, when floats and toys are allowed in the water, take place on Saturday
and Sunday afternoons from one until four. Swimming lessons for children continue on Tuesday and
Thursday evenings, and the adult improvers class has moved to Wednesday at eight. The sauna will be
closed for repairs during the first two weeks of December. Please remember that the last entry to the
pool is thirty minutes before closing time.""",
    [("half past six", "six"), ("Wednesday at eight", "Wednesday at half past seven"), ("thirty minutes", "forty-five minutes")])

add("""Rotating the tyres of a car every ten thousand kilometres helps them wear evenly and last
longer. The front tyres usually wear faster because they steer and, on most cars, also drive the
wheels. To rotate them, loosen the wheel nuts slightly while the car is still on the ground, then
raise one side at a time with a jack and support it on stands. Move the front tyres straight back
and cross the rear tyres to the front, so that the left rear goes to the right front and the right
rear to the left front. Tighten the nuts in a star pattern, lower the car and finish with a torque
wrench set to the value in the manual.""",
    [("ten thousand", "eight thousand"), ("star pattern", "criss-cross pattern")])

add("""Dear Mr Hollis, I am writing about the heating in flat 3 at 22 Orchard Terrace. Since last
weekend the radiators in the bedroom and the living room have stayed cold, although the boiler
seems to be running and the hot water works normally. I have tried bleeding the radiators with the
key you left, but this made no difference. The temperature in the flat has dropped to around
fourteen degrees in the evenings, which is uncomfortable now that the nights are getting colder.
Could you arrange for an engineer to visit this week? I work from home on Mondays and Fridays, so
either of those days would be ideal. Thank you for your help. Kind regards, Anna Berg""",
    [("Mr Hollis", "Mrs Hollis"), ("flat 3", "flat 5"), ("fourteen degrees", "fifteen degrees")])

add("""The ferry across the river leaves the jetty below the church every twenty minutes during the
day. It is a flat wooden boat pulled along a steel cable, so it needs no engine and makes almost no
noise. The crossing takes about four minutes, and the ferryman collects a small fare on board:
bicycles travel free, but there is a charge for cars. In spring, when the river is high after the
snow melts, the service sometimes stops for a few days because the current becomes too strong. On
the far bank a footpath leads through the meadows to a village with a bakery and a small inn, which
makes a pleasant walk on a summer evening.""",
    [("twenty minutes", "thirty minutes"), ("four minutes", "five minutes"), ("bicycles", "dogs")])

add("""A database index works much like the index at the back of a book. Without one, the database
must read every row of a table to find the rows that match a query, which is slow once the table
holds millions of rows. An index keeps a sorted copy of one or more columns together with pointers
to the full rows, so the database can jump straight to the matching entries. Most indexes are stored
as balanced trees, which keep lookups fast even as new rows are added. Indexes are not free, though:
every insert or update must also change each index on the table, and the indexes take disk space.
Add them for the columns your queries filter on most often.""",
    [("millions of rows", "billions of rows"), ("balanced trees", "B-trees")])

add("""On Saturday mornings the old square fills with stalls long before the church bell strikes
eight. The cheese seller from the valley always takes the corner by the fountain, next to a woman
who sells honey in jars of three sizes. Further along there are crates of apples and pears, a van
selling fresh fish on ice, and a table of second hand books sorted by colour rather than by author.
Children gather around the man who carves small wooden animals while they watch. By noon most of the
bread has gone, and the stall holders start to pack away their awnings. The market has been held in
the same square for more than two hundred years.""",
    [("Saturday", "Sunday"), ("honey", "jam"), ("two hundred", "three hundred")])

INSTR = ("Rewrite the passage below exactly as it is, but {changes}. Keep every other word and "
         "all punctuation unchanged. Output only the rewritten passage.\n\n{passage}")

def changes(edits):
    parts = [f"change '{a}' to '{b}'" for a, b in edits]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]

# The same task for a model without a chat template (a base model): the
# prompt ends where the rewritten passage begins.
PROMPT = ("The passage below is rewritten exactly as it is, except that {changes}; every other "
          "word and all punctuation stay unchanged.\n\nOriginal passage:\n{passage}\n\n"
          "Rewritten passage:\n")

def changes_done(edits):
    parts = [f"'{a}' becomes '{b}'" for a, b in edits]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def count_tokens(url, text):
    body = json.dumps({"prompt": text, "add_special_tokens": False}).encode()
    req = urllib.request.Request(url.rstrip("/") + "/tokenize", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.load(r)["count"]


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_text_edit.py CELLM_SERVER_URL (e.g. http://127.0.0.1:8000)")
    chat, prompt = [], []
    for text, edits in P:
        tokens = count_tokens(sys.argv[1], text)
        max_tokens = int(-(-tokens * 1.3 // 8) * 8)  # 1.3x, up to a multiple of 8
        chat.append({"messages": [{"role": "user",
                                   "content": INSTR.format(changes=changes(edits), passage=text)}],
                     "max_tokens": max_tokens})
        # A base model continues past the passage: the blank line ends it.
        prompt.append({"prompt": PROMPT.format(changes=changes_done(edits), passage=text),
                       "max_tokens": max_tokens, "stop": ["\n\n"]})
    here = os.path.dirname(os.path.abspath(__file__))
    for name, rows in (("text_edit.jsonl", chat), ("text_edit_prompt.jsonl", prompt)):
        with open(os.path.join(here, name), "w") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        print(f"wrote {len(rows)} requests to {name}")


if __name__ == "__main__":
    main()
